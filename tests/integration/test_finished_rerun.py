"""Running a finished run's command again changes nothing, whenever it is stopped.

The reference is the finished run folder itself: every file's bytes and modification time
before the re-run.  A re-run of a finished run says in one line that nothing was trained and
returns the run's own ``results.json``; killed at any moment it leaves the folder as it was
(no lock file either).  A longer run (``train.max_steps`` raised) resumes as before, and under
Ray the finished run's ``results.json`` stays in place until the longer run replaces it whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.real_run import REPO, TINY, train_tiny


def snapshot(run: Path) -> dict[str, tuple[str, int]]:
    """``{relative name: (sha256, mtime_ns)}`` of every file of a run folder."""
    out = {}
    for p in sorted(run.rglob("*")):
        if p.is_file():
            out[p.relative_to(run).as_posix()] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mtime_ns,
            )
    return out


def test_rerunning_a_finished_run_trains_and_writes_nothing(real_run, capfd):
    root = Path(real_run["run_dir"]).parents[1]
    run = root / "runs" / "again"
    shutil.copytree(real_run["run_dir"], run, ignore=shutil.ignore_patterns("evaluations"))
    before = snapshot(run)
    capfd.readouterr()
    out = train_tiny(str(root), "again")
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("nothing to train")]
    assert lines == [
        f"nothing to train: run 'again' finished at step 20 ({run}/results.json, left as it "
        "is); a longer train.max_steps or train.epochs continues it, resume=false starts it "
        "afresh"
    ], err
    assert "resuming from" not in err and "data:" not in err  # no model built, no resume
    saved = json.loads((run / "results.json").read_text())
    assert out == {**saved, "nothing_trained": True}
    assert snapshot(run) == before and not (run / ".lock").exists()
    longer = train_tiny(str(root), "again", ["train.max_steps=30"])  # not finished for this
    assert "nothing_trained" not in longer and longer["resumed_from_step"] == 20
    assert json.loads((run / "results.json").read_text())["step"] == 30


RAY_ARGS = [*TINY, "cluster.num_workers=2", "cluster.cpus_per_worker=1"]


def _train(root: Path, extra: list[str] = ()) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    cmd = [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", "run_name=ray"]
    return subprocess.Popen(
        [*cmd, *RAY_ARGS, *extra], cwd=root.parent, env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started
    except ProcessLookupError:
        pass
    proc.communicate(timeout=60)


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_finished_ray_run_survives_reruns_killed_at_any_moment(tmp_path):
    root = tmp_path / "storage"
    first = _train(root)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    run = root / "runs" / "ray"
    before = snapshot(run)
    results = (run / "results.json").read_bytes()

    for delay in (0.5, 2.0, 4.0):  # the same command, SIGKILLed at several moments
        proc = _train(root)
        time.sleep(delay)
        _kill(proc)
        assert snapshot(run) == before, delay
        assert not (run / ".lock").exists(), delay

    again = _train(root)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    assert [line for line in err.splitlines() if line.startswith("nothing to train")], err
    assert json.loads(out.strip().splitlines()[-1])["nothing_trained"] is True
    assert snapshot(run) == before

    # a longer run under Ray: results.json stays whole until the new one replaces it
    longer = _train(root, ["train.max_steps=30"])
    started, seen = time.monotonic(), 0
    try:
        while time.monotonic() - started < 16 and longer.poll() is None:
            now = (run / "results.json").read_bytes()  # never absent
            if now != results:  # replaced whole by the longer run's own
                assert json.loads(now)["step"] == 30
                break
            seen += 1
            time.sleep(0.2)
    finally:
        _kill(longer)
    assert seen > 20 and (run / "results.json").read_bytes() in (results, now)
