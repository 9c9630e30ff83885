"""A crash under Ray (``cluster.num_workers=2``, DDP over gloo on the CPU) is one line.

The real command, ``python -m cmpnn_dist.train``, in a child process with its own local Ray;
rank 1 raises at step 3 (the ``crash`` fault, ``cmpnn_dist/distributed/faults.py``).  Its
stderr ends in one ``error:`` line naming the rank, the step and the cause, and the run
folder's log file, which holds the traceback; no traceback of the crash reaches the console
(neither the driver's own lines nor those Ray forwards from its workers and controller).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cmpnn_dist.distributed import faults
from tests.helpers.cli_run import ARGS, clean_env, driver_lines
from tests.helpers.paths import REPO_ROOT as REPO

pytestmark = pytest.mark.slow


def _train_with_fault(root: Path, run_name: str, fault: str) -> subprocess.CompletedProcess:
    """The real command on 2 Ray workers with ``fault`` injected (faults.py)."""
    cmd = [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", *ARGS,
           f"run_name={run_name}"]  # fmt: skip
    env = clean_env(**{faults.ENV_FAULT: fault})
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.timeout(1200)
def test_a_crashed_rank_is_one_line_naming_rank_step_cause_and_log(tmp_path):
    root = tmp_path / "store"
    proc = _train_with_fault(root, "crash", "crash@rank1:step3")
    assert proc.returncode == 2, proc.stderr[-4000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr[-4000:]
    run = root / "runs" / "crash"
    log = run / "train.log"
    assert errors[0] == (
        "error: distributed training of run 'crash' failed on 1 attempt(s) "
        "(cluster.max_failures=0): rank 1 at step 3: InjectedFault: injected crash on rank 1 "
        f"at step 3; traceback in {log}; submitting again with run_name=crash resumes from "
        "the last valid checkpoint"
    )
    text = log.read_text()
    assert re.search(r"attempt 1: rank 1 at step 3: InjectedFault", text), text[:2000]
    assert "Traceback (most recent call last)" in text and "faults.py" in text
    assert text.count("cmpnn_dist.distributed.faults.InjectedFault: injected crash") >= 1
    # the crash's frames are in the log only: not in the driver's lines, not in Ray's
    assert "Traceback" not in driver_lines(proc.stderr), proc.stderr[-4000:]
    assert "faults.py" not in proc.stderr and "Error in training function" not in proc.stderr
    assert proc.stdout.strip() == ""
    assert Path(errors[0].split("traceback in ", 1)[1].split(";", 1)[0]) == log


_WORKER_LINE = re.compile(r"^(\x1b\[\d+m)?\(RayTrainWorker pid=\d+\)(\x1b\[0m)? ")
_OUR_FIRST_LINES = ("building dataset ", "run folder: ", "resume with: ")


@pytest.mark.timeout(1200)
def test_a_killed_rank_is_named_and_the_console_holds_only_our_lines(tmp_path):
    """``kill@rank1:step3``: rank 1 is SIGKILLed, so rank 0 fails in gloo ("connection reset
    by peer").  The one line blames rank 1, the rank that failed first; the console holds our
    first lines, our workers' lines and that line, nothing of Ray's (its controller's
    tracebacks, the placement-group cleaner, the raylet's "a worker died" go to ray.log)."""
    root = tmp_path / "store"
    proc = _train_with_fault(root, "kill", "kill@rank1:step3")
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert proc.stdout.strip() == "", proc.stdout[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    error = lines[-1]
    assert error.startswith(
        "error: distributed training of run 'kill' failed on 1 attempt(s) "
        "(cluster.max_failures=0): rank 1 at step "
    ), proc.stderr[-4000:]
    assert "its process died without an error" in error and "rank 0 then lost its peer" in error
    others = [ln for ln in lines[:-1]
              if not ln.startswith(_OUR_FIRST_LINES) and not _WORKER_LINE.match(ln)]  # fmt: skip
    assert others == [], "\n".join(others)[-4000:]
    assert len(lines) <= 8, proc.stderr[-4000:]  # 3 first lines, a worker's 1-2, the error
    assert "a worker died" in (root / "runs" / "kill" / "ray.log").read_text().lower()
