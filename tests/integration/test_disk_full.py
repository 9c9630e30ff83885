"""A disk that fills at any write of a checkpoint, metrics, ranks or results file.

``strace`` (``-e inject=SYSCALL:error=ENOSPC:when=N``) makes one exact system call of a real
training run fail with ENOSPC: a write, fsync or rename of the checkpoint of step 20, the
fsync of its folder and of the folder it is renamed into, the copy and publication of
``best``, a metrics.csv append or rewrite, the test ranks, results.json.  Every file the run
writes itself goes through one positioned write (``pwrite64``,
``cmpnn_dist.storage.atomic.write_all``), which only the run's main thread calls, as it alone
calls ``fsync``, ``rename`` and ``mkdir``; strace counts each thread's calls separately.
``N`` is read from an uninjected run of the same command traced the same way (the main
thread issues these calls in the same order each time; the test checks that no other thread
issued one), and each injected run's own trace confirms the failed call hit the intended
file.

Each case: exit status 2 with exactly one ``error:`` line (no traceback) naming the path and
the lack of space, no ``.tmp*`` / ``.old-*`` leftovers in the run folder, the newest
checkpoint left loads, and running the same command again (space available) resumes and ends
with the history and the metrics of the straight run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.real_run import REPO, TINY, history

STRACE = shutil.which("strace")
TRACED = "pwrite64,fsync,rename,mkdir"
ARGS = [*TINY, "train.max_steps=30"]  # checkpoints at 10, 20 and 30 (validated: best, final)

pytestmark = pytest.mark.skipif(
    STRACE is None,
    reason="needs strace to inject ENOSPC at exact system calls (apt-get install strace)",
)

TMP20 = r"checkpoints/\.tmp-step_00000020-[^/]+"  # the temporary folder of checkpoint 20
# (case, syscall, regex on the call's first path relative to the run folder, occurrence,
#  what the error line must name)
CASES = [
    ("state_write", "pwrite64", TMP20 + r"/state\.pt", 0, "step_00000020"),
    ("state_fsync", "fsync", TMP20 + r"/state\.pt", 0, "step_00000020"),
    ("manifest_write", "pwrite64", TMP20 + r"/manifest\.json", 0, "step_00000020"),
    ("tmp_mkdir", "mkdir", TMP20, 0, "step_00000020"),
    ("rename", "rename", TMP20, 0, "step_00000020"),
    ("dir_fsync", "fsync", TMP20, 0, "step_00000020"),  # the folder itself, before its rename
    ("parent_fsync", "fsync", r"checkpoints", 1, "step_00000020"),  # after it (10, 20, 30)
    ("best_copy", "pwrite64", r"checkpoints/\.tmp-best-[^/]+/state\.pt", 0, "step_00000030"),
    ("best_rename", "rename", r"checkpoints/\.tmp-best-[^/]+", 0, "step_00000030"),
    ("metrics_append", "pwrite64", r"metrics\.csv", 14, "metrics.csv"),
    ("metrics_rewrite", "pwrite64", r"\.metrics\.csv\.tmp-[^/]+", 1, "metrics.csv"),
    ("ranks", "pwrite64", r"\.ranks_test_all\.parquet\.tmp-[^/]+", 0, "ranks_test_all.parquet"),
    ("results", "pwrite64", r"\.results\.json\.tmp-[^/]+", 0, "results.json"),
]
# the default suite; the rest with --runslow
FAST = {"state_write", "rename", "dir_fsync", "results"}

CALL = re.compile(r'^(\d+) +(\w+)\((?:AT_FDCWD(?:<[^>]*>)?, )?(?:\d+<([^>]*)>|"([^"]*)")')


def trace_calls(log: Path) -> list[tuple[str, str, str, int]]:
    """``(syscall, first path argument, the line, pid)`` of each traced call, in order."""
    out = []
    for line in log.read_text().splitlines():
        m = CALL.match(line)
        if m:
            out.append((m.group(2), m.group(3) or m.group(4), line, int(m.group(1))))
    return out


def strace(log: Path, *extra: str) -> list[str]:
    """Follow every thread (``-f``), stop only at the traced calls (``--seccomp-bpf``)."""
    return [STRACE, "-f", "--seccomp-bpf", "-o", str(log), "-y", "-e", f"trace={TRACED}", *extra]


def run_cli(root: Path, run: str, cwd: Path, prefix: list[str]):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", f"run_name={run}"]
    return subprocess.run(
        [*prefix, *cmd, *ARGS], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The dataset (built, then stamped so no run writes the stamp), and one straight run of
    the command traced like the injected ones: its calls, summary and history."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.storage import integrity, open_dataset

    probe = subprocess.run(
        [STRACE, "-f", "--seccomp-bpf", "-o", os.devnull, "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr.strip()}")
    base = tmp_path_factory.mktemp("disk_full")
    root = base / "storage"
    path = ensure_dataset(compose_config("default", [f"storage_root={root}", *ARGS]), False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(integrity, "SETTLE_NS", -(10**18))  # stamp the files written just now
        open_dataset(path)
    # the injected runs find ``runs/`` made: so must the straight run, or its mkdir calls
    # (``runs/<name>`` failing, ``runs``, ``runs/<name>`` again) outnumber theirs by two
    (root / "runs").mkdir()
    log = base / "straight.strace"
    out = run_cli(root, "straight", base, strace(log))
    assert out.returncode == 0, out.stderr
    run_dir = root / "runs" / "straight"
    calls = trace_calls(log)
    assert len({c[3] for c in calls}) == 1, "a second thread made a traced call"
    return {
        "root": root,
        "base": base,
        "calls": calls,
        "summary": json.loads(out.stdout.strip().splitlines()[-1]),
        "history": history(run_dir),
    }


def leftovers(run_dir: Path) -> list[str]:
    return sorted(
        str(p.relative_to(run_dir))
        for p in run_dir.rglob("*")
        if ".tmp" in p.name or p.name.startswith(".old-")
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    "case,syscall,pattern,occurrence,names",
    [pytest.param(*c, marks=() if c[0] in FAST else pytest.mark.slow) for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_no_space_at_one_write(straight, case, syscall, pattern, occurrence, names):
    from cmpnn_dist.runs.checkpoint import list_checkpoints, load_checkpoint

    root, base, calls = straight["root"], straight["base"], straight["calls"]
    straight_dir = str(root / "runs" / "straight")
    target = re.compile(re.escape(straight_dir) + "/" + pattern + "$")
    same = [c for c in calls if c[0] == syscall]
    hits = [i for i, c in enumerate(same) if target.match(c[1])]
    assert len(hits) > occurrence, f"{case}: the straight run made no such call"
    when = hits[occurrence] + 1  # strace counts this thread's calls of `syscall` from 1

    log = base / f"{case}.strace"
    out = run_cli(root, case, base, strace(log, "-e", f"inject={syscall}:error=ENOSPC:when={when}"))
    run_dir = root / "runs" / case
    injected = [c for c in trace_calls(log) if c[2].endswith("(INJECTED)")]
    mine = re.compile(re.escape(str(run_dir)) + "/" + pattern + "$")
    assert len(injected) == 1 and mine.match(injected[0][1]), injected

    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    assert names in errors[0] and "no space left on device" in errors[0], errors[0]
    assert str(run_dir) in errors[0]
    assert leftovers(run_dir) == []
    found = list_checkpoints(run_dir / "checkpoints")
    assert found, "the checkpoint before the failure is gone"
    assert load_checkpoint(found[-1][1])["step"] == found[-1][0]

    # the same command again, space available: here in this process (the CLI's own entry)
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.cli.train import train

    argv = [f"storage_root={root}", f"run_name={case}", *ARGS]
    summary = json.loads(json.dumps(train(compose_config("default", argv), argv), default=str))
    assert summary["resumed_from_step"] == found[-1][0]
    assert summary["valid"] == straight["summary"]["valid"]
    assert summary["test"] == straight["summary"]["test"]
    assert history(run_dir) == straight["history"]
    assert leftovers(run_dir) == []
