"""Names stay inside the store, and one run owns a run folder at a time.

``run_name``, ``data.name`` and ``sweep_name`` that would leave the store (separators, ``..``,
absolute paths, hidden names) are one ``error:`` line, exit status 2, with nothing written
anywhere; a second run on a locked folder is one line naming the owner's host and pid; the
lock of a dead process is taken over with one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.cli.train import _main
from cmpnn_dist.runs.folder import LOCK_FILE, RunLock
from cmpnn_dist.runs.processes import REUSE_MARGIN_S, identity, started_at, still_running
from cmpnn_dist.storage import StorageError
from tests.helpers.real_run import TINY, hold_lock


@pytest.mark.parametrize(
    "arg",
    [
        "run_name=../../x",
        "run_name=/tmp/elsewhere",
        "run_name=a/../../b",
        "run_name=.hidden",
        "data.name=../escaped",
        "data.name=/abs/data",
        "data.name=a/b",
    ],
)
def test_a_name_that_leaves_the_store_is_one_error_line(tmp_path, capsys, monkeypatch, arg):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "store"
    argv = [f"storage_root={root}", *[a for a in TINY if not a.startswith("data.name")], arg]
    assert run_cli(_main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert arg.split("=")[0] in err[0] and "inside the store" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, anywhere


def test_a_sweep_name_that_leaves_the_store_is_one_error_line(tmp_path, capsys):
    argv = ["-m", f"storage_root={tmp_path}", "sweep_name=../x", "train.seed=0,1"]
    assert run_cli(_main, argv) == 2
    assert "sweep_name='../x' must be a plain folder name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.integration
def test_a_locked_run_folder_is_refused_naming_its_owner(tmp_path, capsys):
    """The lock of a live process (a real child holding the product's lock) refuses a second
    run."""
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    owner = hold_lock(run, "time.sleep(60)")
    try:
        argv = [f"storage_root={tmp_path}", "run_name=tiny", *TINY]
        assert run_cli(_main, argv) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"error: run folder {run} is in use by pid {owner.pid} on host")
        assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]  # nothing else written
    finally:
        owner.kill()
        owner.wait()
    # the owner is gone: the next run takes the lock over (one line) and trains
    assert run_cli(_main, argv) == 0
    err = capsys.readouterr().err
    assert f"taking over the lock of run folder {run} (pid {owner.pid}" in err
    assert not (run / LOCK_FILE).exists()  # released at the end
    assert (run / "checkpoints" / "best" / "manifest.json").is_file()


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
def test_a_process_is_named_by_its_boot_and_start_not_its_pid_alone():
    """The same pid under another start time (its earlier owner) or another boot is another
    process; an earlier version's lock (no identity) goes by its wall-clock time."""
    t0 = time.time()
    a = _sleeper()
    t1 = time.time()
    try:
        mine = identity(a.pid)
        assert mine is not None and mine == identity(a.pid)  # stable while it runs
        boot, ticks = mine.split("/")
        assert boot == identity(os.getpid()).split("/")[0]  # one boot for every process
        began = started_at(a.pid)
        # btime is whole seconds and start times are clock ticks: within two seconds
        assert began is not None and t0 - 2 <= began <= t1 + 2
        assert still_running(a.pid, mine, t0)
        assert not still_running(a.pid, f"{boot}/{int(ticks) - 1}", t0)  # the pid's last owner
        assert not still_running(a.pid, f"another-boot/{ticks}", t0)  # before a reboot
        # an earlier version's lock: its writer began before it wrote it, a later process not
        assert still_running(a.pid, None, t1)
        assert not still_running(a.pid, None, t0 - REUSE_MARGIN_S - 10)
    finally:
        a.kill()
        a.wait()
    assert identity(a.pid) is None and not still_running(a.pid, mine, t0)


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs Linux /proc")
def test_a_lock_whose_pid_another_process_now_has_is_taken_over(tmp_path, capsys):
    """A lock left by a run killed with SIGKILL, whose pid the kernel then gave to another
    process (after a reboot, or once pids wrap): the lock names a live pid, but not its
    writer, so the next run takes it over instead of refusing it until that process ends.
    The reuse itself cannot be forced, so the killed writer's real lock gets the pid of a
    process started afterwards; the same for a lock of an earlier version (no ``process``)."""
    for earlier_version in (False, True):  # a run folder each (a finished run trains nothing)
        name = f"tiny{int(earlier_version)}"
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        argv = [f"storage_root={tmp_path}", f"run_name={name}", *TINY]
        writer = hold_lock(run, "")
        writer.wait()  # exits without releasing: the lock stays, as after SIGKILL
        lock = json.loads((run / LOCK_FILE).read_text())
        assert lock["pid"] == writer.pid and lock["process"] is not None
        later = _sleeper()
        try:
            lock["pid"] = later.pid
            if earlier_version:
                del lock["process"]
                lock["started"] -= REUSE_MARGIN_S + 10  # written well before `later` began
            (run / LOCK_FILE).write_text(json.dumps(lock))
            assert run_cli(_main, argv) == 0
            err = capsys.readouterr().err
            assert f"taking over the lock of run folder {run} (pid {later.pid}" in err
            assert later.poll() is None  # the process with the pid now was left alone
        finally:
            later.kill()
            later.wait()
        assert not (run / LOCK_FILE).exists()
        assert (run / "results.json").is_file()


def test_a_lock_on_another_host_is_refused_and_released_locks_are_gone(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_FILE).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    with pytest.raises(StorageError, match="in use by pid 1 on host elsewhere"):
        RunLock(str(run)).acquire()
    (run / LOCK_FILE).unlink()
    with RunLock(str(run)) as lock:
        assert json.loads(Path(lock.path).read_text())["pid"] > 0
        with pytest.raises(StorageError, match="in use by pid"):
            RunLock(f"file://{run}").acquire()  # the same folder by its URI
    assert not (run / LOCK_FILE).exists()
