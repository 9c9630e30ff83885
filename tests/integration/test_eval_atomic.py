"""``evaluate`` publishes its outputs all together or not at all.

A child process evaluates a copy of the session's tiny real run and is SIGKILLed when it
starts ranking the test split (after the valid split's ranks exist in its staging folder):
``<run>/evaluations/`` must hold no evaluation folder afterwards (only the dead staging
folder), the run's own files are untouched, and the next evaluation drops the dead staging
folder and publishes its folder whole.  The sharded (Ray) case,
a worker killed mid-evaluation and retried, is the slow test at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli
from tests.helpers.paths import REPO_ROOT as REPO

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import cmpnn_dist.training.validation as v
    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.evaluate import _main

    split = v.evaluate_split

    def evaluate_split(*args, **kwargs):
        if kwargs.get("split_name") == "test":
            os.kill(os.getpid(), signal.SIGKILL)
        return split(*args, **kwargs)

    v.evaluate_split = evaluate_split
    sys.exit(run_cli(_main, sys.argv[1:]))
    """
)


@pytest.mark.integration
def test_a_killed_evaluation_leaves_nothing_and_the_next_one_publishes_all(real_run, tmp_path):
    from cmpnn_dist.cli.evaluate import _main

    run = tmp_path / "run"  # the run as training left it (other tests evaluate the original)
    shutil.copytree(real_run["run_dir"], run, ignore=shutil.ignore_patterns("evaluations"))
    before = _files(run)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, f"ckpt={run}/checkpoints/best"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-2000:]
    evaluations = run / "evaluations"
    staged = [p.name for p in evaluations.iterdir()]
    assert len(staged) == 1 and staged[0].startswith(".tmp-eval-"), staged  # it was staging
    assert {k: v for k, v in _files(run).items() if not k.startswith("evaluations/")} == before
    assert run_cli(_main, [f"ckpt={run}/checkpoints/best"]) == 0
    folder = evaluations / "best.best-weights.all-pessimistic.all-queries"
    assert [p.name for p in evaluations.iterdir()] == [folder.name]  # the dead staging: gone
    names = {p.name for p in folder.iterdir()}
    assert names == {"ranks_valid_all.parquet", "ranks_test_all.parquet", "results.json"}
    assert {k: v for k, v in _files(run).items() if not k.startswith("evaluations/")} == before


def _files(run: Path) -> dict[str, tuple[int, int]]:
    """Every file of a run folder: ``{relative name: (size, mtime_ns)}``."""
    out = {}
    for p in run.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[p.relative_to(run).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.mark.slow
def test_a_sharded_evaluation_retries_a_killed_worker(real_run, tmp_path, monkeypatch):
    """Worker 1 is SIGKILLed at its first scored batch (once); the group ranks again and the
    result equals the one-process evaluation."""
    from cmpnn_dist.cli.evaluate import evaluate_checkpoint

    run = tmp_path / "run"
    shutil.copytree(real_run["run_dir"], run)
    one = evaluate_checkpoint(run / "checkpoints" / "best", [])
    monkeypatch.setenv("CMPNN_FAULT", "kill@rank1:step1")
    monkeypatch.setenv("CMPNN_FAULT_DIR", str(tmp_path / "faults"))
    (tmp_path / "faults").mkdir()
    opts = ["cluster.num_workers=2", "cluster.cpus_per_worker=1", "cluster.max_failures=1"]
    two = evaluate_checkpoint(run / "checkpoints" / "best", opts)
    assert (tmp_path / "faults" / "kill-rank1-step1.fired").exists()
    assert two["test"]["mrr"] == pytest.approx(one["test"]["mrr"], abs=1e-9)
    assert two["valid"]["mrr"] == pytest.approx(one["valid"]["mrr"], abs=1e-9)
