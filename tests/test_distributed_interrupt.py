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
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _real_run import logged_train_steps

from cmpnn_dist.distributed import faults
from cmpnn_dist.runs.checkpoint import load_checkpoint, read_manifest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 24
EVERY = 4
ARGS = [
    "data.name=rk60",
    "+data.synthetic.num_entities=60",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "ops.impl=reference",
    "train.batch_size=4",
    "train.num_negatives=8",
    f"train.max_steps={MAX_STEPS}",
    "train.deterministic=true",
    "train.device=cpu",
    "train.progress=false",
    "eval.max_queries=8",
    "eval.batch_size=8",
    f"checkpoint.every_steps={EVERY}",
    "cluster.num_workers=2",
    "cluster.collective_timeout_s=120",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


def _train_cmd(root: Path, run_name: str) -> list[str]:
    return [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", *ARGS,
            f"run_name={run_name}"]  # fmt: skip


def _summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _interrupt(root: Path, run_name: str, signum: int) -> tuple[int, str]:
    """Start the run, send ``signum`` to the driver once a step past the first scheduled
    checkpoint is in metrics.csv; returns (exit status, stdout + stderr)."""
    env = _env(**{faults.ENV_FAULT: "slow@rank0:step1", faults.ENV_SLOW_S: "0.25"})
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


# a line Ray forwards from one of its actors' logs: "(TrainController pid=123) ...", coloured
_RAY_ACTOR_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+")


def _ours(output: str) -> str:
    """The driver's own output: without the lines Ray forwards from its actors (Ray Train's
    controller logs a traceback of its own when a resource request times out on a loaded
    machine; that is Ray's log, not an error the run reports)."""
    return "\n".join(ln for ln in output.splitlines() if not _RAY_ACTOR_LINE.match(ln))


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
            env=_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    )
    status, output = _interrupt(root, "cut", signal.SIGTERM)
    assert status == 143, output[-4000:]
    assert "Traceback" not in _ours(output), output[-4000:]
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
    resumed = subprocess.run([sys.executable, *argv[1:]], cwd=REPO, env=_env(),
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
    assert "Traceback" not in _ours(output), output[-4000:]
    step, ckpt, resume = _the_line(output, signal.SIGINT)
    assert EVERY < step < MAX_STEPS and resume.endswith("run_name=cc")
    assert Path(ckpt) == root / "runs" / "cc" / "checkpoints" / f"step_{step:08d}"
    assert read_manifest(Path(ckpt), verify_checksums=True)
