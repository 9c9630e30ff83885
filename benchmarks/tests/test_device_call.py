"""A device call (``benchmarks/device/call.py``) keeps to its budget and packs after every step:
checked with real short processes on the CPU (the plans' benchmarks themselves need a card)."""

from __future__ import annotations

import sys
import tarfile
import time

import pytest

from benchmarks.device.call import Call, Step, plan

pytestmark = pytest.mark.integration


def py(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_a_step_past_its_cap_is_stopped_and_the_earlier_ones_stay_packed(tmp_path):
    call = Call(tmp_path / "work", tmp_path / "out", budget=30)
    ok = Step("first", py("print('| a | 1 |'); print('noise')"), 20, "first.log")
    slow = Step("slow", py("import time; time.sleep(60)"), 2, "slow.log")
    assert call.run(ok, {}) == 0
    assert call.run(slow, {}) == 124
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "first rc=0" in summary and "| a | 1 |" in summary and "noise" not in summary
    assert "slow rc=124" in summary
    with tarfile.open(tmp_path / "out" / "call.tar.gz") as tar:
        assert {"first.log", "slow.log", "summary.txt"} <= set(tar.getnames())


def test_the_budget_caps_a_step_below_its_own_cap(tmp_path):
    call = Call(tmp_path / "work", tmp_path / "out", budget=18)  # 3 s after the packing's 15
    step = Step("long", py("import time; time.sleep(60)"), 100, "long.log")
    assert call.run(step, {}) == 124
    assert "(cap 2 s" in (tmp_path / "out" / "summary.txt").read_text()


def test_every_plan_names_benchmarks_that_exist(tmp_path):
    import importlib

    for name in ("session", "check", "pruned", "cells"):
        for step in plan(name, str(tmp_path)):
            if step.argv[1:3] == ("-m", "pytest"):
                continue
            importlib.import_module(step.argv[2])  # the module a step runs


def test_a_step_that_reads_the_graph_waits_for_its_build(tmp_path):
    import subprocess

    call = Call(tmp_path / "work", tmp_path / "out", budget=60)
    cache = tmp_path / "graph.npz"
    build = f"import time, pathlib; time.sleep(2); pathlib.Path({str(cache)!r}).write_text('g')"
    call.builder = subprocess.Popen([sys.executable, "-c", build])
    reads = f"import pathlib, sys; sys.exit(0 if pathlib.Path({str(cache)!r}).is_file() else 3)"
    assert call.run(Step("layer", py(reads), 20, "layer.log", graph=True), {}) == 0
    assert "graph cache built (rc=0)" in (tmp_path / "out" / "summary.txt").read_text()
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    call.builder = slow
    call.end = time.monotonic() + 18  # 3 s left before the packing's 15
    try:
        assert call.run(Step("late", py("pass"), 20, "late.log", graph=True), {}) == 0
        assert "still building" in (tmp_path / "out" / "summary.txt").read_text()
    finally:
        slow.kill()
        slow.wait()
