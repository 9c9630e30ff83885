"""A SIGKILLed driver's Ray Train workers stop writing before a restarted driver begins.

A real ``python -m cmpnn_dist.train ... cluster.num_workers=2`` run (a local Ray, DDP over
gloo) checkpoints every step; once it has a few checkpoints its driver process alone is
killed with SIGKILL (as the OOM killer does) and the same command starts again at once.  A
thread follows the run folder's checkpoints and both process trees every 50 ms until the new
driver's workers exist.  Without the fix the old workers went on publishing checkpoints for up
to 2 s (one every step here), beside the new driver; now:

* at most one checkpoint appears after the kill (one whose publication had begun);
* no process of the old run (workers, raylet, GCS, dashboard and runtime-env agents) is left
  10 s after the kill, and none of the old workers is alive once a new worker exists;
* the new driver says it took over the lock, and resumes from the newest checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.sockets import descendants

ARGS = [
    "data.name=tiny", "data.source=synthetic:rule_kg", "+data.synthetic.num_entities=60",
    "model.num_layers=2", "model.hidden_dim=8", "model.decoder_hidden_dim=8",
    "ops.impl=reference", "train.batch_size=4", "train.num_negatives=8", "train.max_steps=400",
    "checkpoint.every_steps=1", "checkpoint.keep_last=50", "eval.max_queries=8",
    "eval.batch_size=8", "train.progress=false", "cluster.num_workers=2",
    "cluster.collective_timeout_s=120", "run_name=kill",
]  # fmt: skip


def _start(root: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "CMPNN_"))}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "cmpnn_dist.train", *ARGS, f"storage_root={root}"]
    with open(log, "w") as out:
        return subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(procs: dict[int, str | None]) -> list[int]:
    """The pids of ``procs`` (pid -> start time) still running as the same process."""
    out = []
    for pid, began in procs.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and _start_time(pid) == began:
            out.append(pid)
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _workers(pid: int) -> list[int]:
    return [p for p in descendants(pid) if _comm(p).startswith("ray::RayTrainWo")]


def _steps(run: Path) -> set[int]:
    return {step for step, _ in CheckpointStore(str(run)).candidates()}


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_killed_drivers_workers_stop_before_the_restart_writes(tmp_path) -> None:
    run = tmp_path / "runs" / "kill"
    first = _start(tmp_path, tmp_path / "first.log")
    second = None
    old: dict[int, str | None] = {}
    try:
        deadline = time.monotonic() + 400
        while len(_steps(run)) < 3 or len(_workers(first.pid)) < 2:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no third checkpoint in time"
            time.sleep(0.2)
        old = {p: _start_time(p) for p in descendants(first.pid) if p != first.pid}
        old_workers = {p: old[p] for p in _workers(first.pid)}
        assert len(old_workers) == 2
        os.kill(first.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        first.wait(timeout=30)  # reaped, as a shell reaps its killed job
        at_kill = max(_steps(run))
        second = _start(tmp_path, tmp_path / "second.log")
        after_kill: set[int] = set()
        old_left_at_new_worker = None
        all_gone_after = None
        while old_left_at_new_worker is None or all_gone_after is None:
            now = time.monotonic()
            assert now - killed_at < 400, "the second run started no worker in time"
            assert second.poll() is None, (tmp_path / "second.log").read_text()[-3000:]
            if old_left_at_new_worker is None:
                after_kill |= {s for s in _steps(run) if s > at_kill}
                if _workers(second.pid):
                    old_left_at_new_worker = _alive(old_workers)
            if all_gone_after is None and not _alive(old):
                all_gone_after = now - killed_at
            time.sleep(0.05)
        log = (tmp_path / "second.log").read_text()
        deadline = time.monotonic() + 300
        while "resuming from step" not in log:
            assert second.poll() is None and time.monotonic() < deadline, log[-3000:]
            time.sleep(0.5)
            log = (tmp_path / "second.log").read_text()
    finally:
        first.kill()
        first.wait(timeout=60)
        if second is not None:
            _stop(second)
        for pid in _alive(old):
            os.kill(pid, signal.SIGKILL)
    print(f"killed at step {at_kill}; published after: {sorted(after_kill)}; old processes "
          f"gone after {all_gone_after:.1f} s; old workers alive at the first new one: "
          f"{old_left_at_new_worker}")  # fmt: skip
    assert len(after_kill) <= 1, f"the old workers published steps {sorted(after_kill)}"
    assert old_left_at_new_worker == []
    assert all_gone_after < 10.0, f"the old run's processes took {all_gone_after:.1f} s"
    assert "taking over the lock of run folder" in log
    newest = max([at_kill, *after_kill])
    assert f"resuming from step {newest}" in log, log[-3000:]
