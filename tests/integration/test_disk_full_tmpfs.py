"""A really full filesystem under the TensorBoard folder and under the dataset being built.

Two writes that ``tests/integration/test_disk_full.py`` cannot aim at with strace (the TensorBoard
events are written by a background thread; a dataset build writes through Arrow) run here on
a tiny tmpfs mounted where the run writes them (root only: skipped where ``mount`` is not
allowed).  Each: exit status 2 with exactly one ``error:`` line naming the folder and the lack
of space, no traceback (no ``Exception in thread``), nothing half-built left; once there is
space, the same command resumes (TensorBoard: from the checkpoint the failure stopped at,
ending with the straight run's history) or builds and trains (the dataset).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.real_run import REPO, TINY, history, train_tiny

ARGS = [*TINY, "train.max_steps=40"]  # checkpoints at 10, 20, 30, 40

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (made if absent) for the block."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True, text=True,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def run_cli(root: Path, run: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", f"run_name={run}"]
    return subprocess.run(
        [*cmd, *ARGS], capture_output=True, text=True, env=env, cwd=root.parent, timeout=600
    )


def one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr
    assert "no space left on device" in errors[0], errors[0]
    return errors[0]


def test_tensorboard_events_on_a_full_disk(tmp_path):
    root = tmp_path / "storage"
    straight = train_tiny(str(root), "straight", ARGS[len(TINY) :])
    run = root / "runs" / "tb"
    with full_tmpfs(run / "tensorboard", "4k"):
        proc = run_cli(root, "tb")
        error = one_error(proc)
        assert f"{run}/tensorboard" in error
    steps = sorted(int(p.name[5:]) for p in (run / "checkpoints").glob("step_*"))
    assert steps and steps[-1] < 40 and not (run / "results.json").exists()
    resumed = run_cli(root, "tb")  # space again: the same command
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    out = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert out["resumed_from_step"] == steps[-1]
    assert out["valid"] == straight["valid"] and out["test"] == straight["test"]
    assert history(run) == history(root / "runs" / "straight")


def test_a_dataset_build_on_a_full_disk(tmp_path):
    root = tmp_path / "storage"
    datasets = root / "datasets"
    with full_tmpfs(datasets, "64k"):
        proc = run_cli(root, "ds")
        error = one_error(proc)
        assert f"{datasets}/rk300" in error
        assert list(datasets.iterdir()) == []  # no half-built dataset, no staging folder
    assert not (root / "runs" / "ds").exists()
    again = run_cli(root, "ds")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["test"]["num_queries"] > 0
