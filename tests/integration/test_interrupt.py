"""Ctrl-C / SIGTERM during training: one line, a checkpoint at the current step, the resume
command, exit status 130 / 143; resuming from that checkpoint is bit-identical to the
uninterrupted run (the session's tiny real run, tests/helpers/real_run.py).

The signal is real: the child process sends it to itself from inside training step k (a
wrapper around ``Trainer.train_step``), so it arrives mid-step exactly as a Ctrl-C would.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from cmpnn_dist.runs.checkpoint import load_checkpoint, read_manifest
from tests.helpers.real_run import interrupt_tiny, train_tiny

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_checkpoints_the_current_step_and_resume_is_bit_identical(
    real_run, tmp_path, signum, status
):
    proc = interrupt_tiny(tmp_path, str(tmp_path), signum, at=7)
    assert proc.returncode == status, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    run = tmp_path / "runs" / "tiny"
    name = signal.Signals(signum).name
    assert last.startswith(f"interrupted by {name} at step 7: checkpoint {run}/checkpoints/")
    assert f"resume with: python -m cmpnn_dist.train storage_root={tmp_path}" in last
    assert last.endswith("run_name=tiny")
    assert read_manifest(run / "checkpoints" / "step_00000007", verify_checksums=True)
    if signum != signal.SIGTERM:
        return
    resumed = train_tiny(str(tmp_path))
    assert resumed["resumed_from_step"] == 7
    assert resumed["test"] == real_run["test"] and resumed["valid"] == real_run["valid"]
    ours = load_checkpoint(run / "checkpoints" / "step_00000020")
    ref = load_checkpoint(Path(real_run["run_dir"]) / "checkpoints" / "step_00000020")
    for key, value in ref["model"].items():
        assert torch.equal(ours["model"][key], value), key


def test_a_signal_before_the_first_checkpoint_keeps_the_run_folder(tmp_path):
    proc = interrupt_tiny(tmp_path, str(tmp_path), signal.SIGINT, at=2)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr
    assert (tmp_path / "runs" / "tiny" / "checkpoints" / "step_00000002").is_dir()
