"""``python -m benchmarks``: it lists every suite, and a quick run of a suite runs each target's
cheap mode end to end, in a scratch folder, leaving the committed figures as they were."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def committed() -> str:
    return subprocess.run(["git", "status", "--porcelain", "benchmarks/results"], cwd=REPO_ROOT,
                          capture_output=True, text=True).stdout  # fmt: skip


def test_the_listing_names_every_suite_and_target():
    from benchmarks.harness.suites import STUDIES, SUITES, targets

    out = run().stdout
    for suite in (*SUITES, STUDIES):
        assert f"\n{suite}: " in f"\n{out}"
        assert all(t.label() in out for t in targets(suite))


def test_a_quick_suite_runs_every_target_and_writes_no_figure():
    before = committed()
    proc = run("wl", "--quick")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "wl_logic               ok" in proc.stdout
    assert "wl_time                skipped" in proc.stdout  # no quick run
    assert committed() == before


def test_unknown_names_are_refused():
    proc = run("opz")
    assert proc.returncode == 2 and "no suite 'opz'" in proc.stderr
    proc = run("ops", "--only", "cpu_kernelz")
    assert proc.returncode == 2 and "no target cpu_kernelz in ops" in proc.stderr
