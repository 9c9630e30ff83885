"""Ctrl-C / SIGTERM under Ray (``cluster.num_workers=2``, DDP over gloo on the CPU): the
workers finish the current step, checkpoint it and stop; the driver prints one line naming
the signal, the step, the checkpoint and the resume command, and exits 130 / 143; running
that resume command ends bit-identical to an uninterrupted run.

Everything runs through ``python -m cmpnn_dist.train`` in a child process with its own local
Ray; the signal goes to the driver process only (a terminal's Ctrl-C reaches the driver
alone too: Ray starts its processes with SIGINT blocked).  The run is paced with the ``slow``
fault (rank 0 sleeps in each forward pass, numbers unchanged) so a tiny run is still going
when the signal arrives.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cmpnn_dist.distributed import faults
from cmpnn_dist.runs.checkpoint import load_checkpoint, read_manifest
from tests.helpers.cli_run import ARGS, EVERY, MAX_STEPS, clean_env, driver_lines
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.real_run import logged_train_steps

pytestmark = pytest.mark.slow


def _train_cmd(root: Path, run_name: str) -> list[str]:
    return [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", *ARGS,
            f"run_name={run_name}"]  # fmt: skip


def _summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _interrupt(root: Path, run_name: str, signum: int) -> tuple[int, str]:
    """Start the run, send ``signum`` to the driver once a step past the first scheduled
    checkpoint is in metrics.csv; returns (exit status, stdout + stderr)."""
    env = clean_env(**{faults.ENV_FAULT: "slow@rank0:step1", faults.ENV_SLOW_S: "0.25"})
    proc = subprocess.Popen(_train_cmd(root, run_name), cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    run = root / "runs" / run_name
    try:
        deadline = time.monotonic() + 400
        while not [s for s in logged_train_steps(run) if s > EVERY]:
            assert proc.poll() is None, proc.stdout.read()[-4000:]
            assert time.monotonic() < deadline, "no step past the first checkpoint in time"
            time.sleep(0.05)
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, output


def _the_line(output: str, signum: int) -> tuple[int, str, str]:
    """The one interruption line: (step, checkpoint, resume command)."""
    name = signal.Signals(signum).name
    lines = [ln for ln in output.splitlines() if ln.startswith("interrupted by")]
    assert len(lines) == 1, output[-4000:]
    m = re.fullmatch(
        rf"interrupted by {name} at step (\d+): checkpoint (\S+) written; resume with: (.+)",
        lines[0],
    )
    assert m, lines[0]
    print(lines[0])
    return int(m.group(1)), m.group(2), m.group(3)


def _model(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoints" / f"step_{step:08d}")["model"]


@pytest.mark.timeout(1200)
def test_sigterm_checkpoints_the_step_and_resume_is_bit_identical(tmp_path):
    root = tmp_path / "store"
    ref = _summary(
        subprocess.run(
            _train_cmd(root, "ref"),
            cwd=REPO,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    )
    status, output = _interrupt(root, "cut", signal.SIGTERM)
    assert status == 143, output[-4000:]
    assert "Traceback" not in driver_lines(output), output[-4000:]
    step, ckpt, resume = _the_line(output, signal.SIGTERM)
    run = root / "runs" / "cut"
    assert EVERY < step < MAX_STEPS
    assert ckpt == str(run / "checkpoints" / f"step_{step:08d}")
    assert read_manifest(Path(ckpt), verify_checksums=True)
    assert load_checkpoint(Path(ckpt))["step"] == step
    assert max(logged_train_steps(run)) == step  # every rank stopped at that step
    assert not (run / "results.json").exists()

    argv = shlex.split(resume)
    assert argv[:3] == ["python", "-m", "cmpnn_dist.train"] and argv[-1] == "run_name=cut"
    resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, env=clean_env(),
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    out = _summary(resumed)
    assert f"resuming from step {step}" in resumed.stderr
    assert out["resumed_from_step"] == step
    assert out["valid"] == ref["valid"] and out["test"] == ref["test"]
    ours, theirs = _model(run, MAX_STEPS), _model(root / "runs" / "ref", MAX_STEPS)
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key
    assert logged_train_steps(run) == list(range(1, MAX_STEPS + 1))


@pytest.mark.timeout(600)
def test_ctrl_c_checkpoints_the_step_and_exits_130(tmp_path):
    root = tmp_path / "store"
    status, output = _interrupt(root, "cc", signal.SIGINT)
    assert status == 130, output[-4000:]
    assert "Traceback" not in driver_lines(output), output[-4000:]
    step, ckpt, resume = _the_line(output, signal.SIGINT)
    assert EVERY < step < MAX_STEPS and resume.endswith("run_name=cc")
    assert Path(ckpt) == root / "runs" / "cc" / "checkpoints" / f"step_{step:08d}"
    assert read_manifest(Path(ckpt), verify_checksums=True)
