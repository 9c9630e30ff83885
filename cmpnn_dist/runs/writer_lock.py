"""One writer per run folder, also when the writer is not the process that holds the lock.

Under Ray the driver holds ``<run>/.lock`` (:class:`~cmpnn_dist.runs.folder.RunLock`)
while rank 0 of its Ray Train workers, another process, writes the checkpoints, the metrics
and ``results.json``.  A driver killed with SIGKILL leaves its workers running for a moment
(until Ray or the reaper stops them), and a new driver could take the lock over meanwhile.
Two rules keep one writer at any time:

* the worker records itself in ``<run>/.lock.writer`` (:func:`register_writer`: host, pid,
  start identity, and the lock owner it writes for) and, before publishing anything, checks
  that the lock is still its driver's and, on the driver's host, that the driver still runs
  (:func:`check_owner`; :class:`OwnerGone` otherwise, which stops it);
* a process taking over the lock of a dead owner first waits for that owner's recorded
  writer to end (:func:`wait_for_writer`), stopping it after ``WRITER_GRACE_S``: it can no
  longer publish anyway, and it must not write after the new owner begins.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from cmpnn_dist.storage import fs
from cmpnn_dist.storage.atomic import write_atomic
from cmpnn_dist.storage.errors import StorageError

from .processes import identity, still_running

LOCK_FILE = ".lock"
WRITER_FILE = ".lock.writer"
WRITER_GRACE_S = 10.0


class OwnerGone(StorageError):
    """The run's lock is no longer held by the driver this worker writes for."""


def same_owner(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("host", "pid", "process", "started"))


def _read(path: str) -> dict[str, Any] | None:
    try:
        value = json.loads(fs.read_text(path))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def register_writer(run: str, owner: dict[str, Any]) -> None:
    """Record this process as the writer of ``run`` for the lock ``owner``."""
    pid = os.getpid()
    record = {"host": socket.gethostname(), "pid": pid, "process": identity(pid), "owner": owner}
    path = fs.join(fs.normalize(run), WRITER_FILE)
    local = fs.local_path(path)
    if local is not None:
        write_atomic(local, json.dumps(record))
    else:
        fs.write_text(path, json.dumps(record))


def check_owner(run: str, owner: dict[str, Any]) -> None:
    """Raise :class:`OwnerGone` unless ``run``'s lock is ``owner``'s and, when ``owner`` is a
    process of this host, that process still runs."""
    lock = _read(fs.join(fs.normalize(run), LOCK_FILE))
    if lock is None or not same_owner(lock, owner):
        who = f"pid {owner.get('pid')} on {owner.get('host')}"
        raise OwnerGone(
            f"run folder {run}: its lock is no longer held by its driver ({who}); this worker "
            "stops writing"
        )
    pid = owner.get("pid")
    here = owner.get("host") == socket.gethostname() and isinstance(pid, int)
    if here and not still_running(pid, owner.get("process"), owner.get("started")):
        raise OwnerGone(f"run folder {run}: its driver (pid {pid}) is gone; this worker stops")


def wait_for_writer(run: str, say: Callable[[str], None], grace_s: float = WRITER_GRACE_S) -> None:
    """Before taking over ``run``'s lock from a dead owner: wait until the writer that owner
    recorded (a process of this host) has ended; SIGKILL it after ``grace_s``."""
    writer = _read(fs.join(fs.normalize(run), WRITER_FILE))
    if writer is None or writer.get("host") != socket.gethostname():
        return
    pid, who = writer.get("pid"), writer.get("process")
    if not isinstance(pid, int) or not still_running(pid, who):
        return
    say(f"waiting for the previous owner's writer (pid {pid}) to stop")
    deadline = time.monotonic() + grace_s
    while still_running(pid, who) and time.monotonic() < deadline:
        time.sleep(0.1)
    if still_running(pid, who):
        say(f"stopping the previous owner's writer (pid {pid}): it is still running")
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + grace_s
        while still_running(pid, who) and time.monotonic() < deadline:
            time.sleep(0.1)
    if still_running(pid, who):
        raise StorageError(
            f"run folder {run}: the previous owner's writer (pid {pid}) does not stop; "
            "wait for it or use another run_name"
        )
