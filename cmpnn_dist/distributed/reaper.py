"""Stop the Ray processes a driver started when the driver dies without stopping them.

``ray.init(address="local")`` starts a GCS server, a raylet and their agents (the dashboard
agent, the runtime-env agent...).  ``ray.shutdown()`` stops them; a driver killed with SIGKILL
(or the OOM killer) never runs it, and the agents were seen to outlive it by minutes.  So a
driver that starts its own Ray also starts this watcher (:func:`start_reaper`): a small
process in its own session that polls the driver's pid once a second and, meanwhile, notes
every process below the driver (its process tree, with each one's start time: the agents and
workers rename themselves, ``ray::DashboardAgent``, so their command lines no longer name
the session).  When the driver is gone it sends SIGTERM (then, 3 s later, SIGKILL) to every
process it noted that still runs (same pid, same start time) and to every process whose
command line names the Ray *session folder of that driver* (``--session-dir=...``: unique to
that cluster), each by its pid: all are gone within about 5 s of the driver.  It exits by
itself once no process of the session is left (after a normal ``ray.shutdown()``).

Its command: ``python -m cmpnn_dist.cli.reaper DRIVER_PID SESSION_DIR``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cmpnn_dist.runs.processes import identity

TERM_GRACE_S = 3.0


def session_pids(session_dir: str) -> list[int]:
    """Pids of the processes whose command line names ``session_dir`` (never this one)."""
    out = []
    needle = session_dir.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            out.append(int(proc.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children...), from ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def watch(driver: int, session_dir: str, poll_s: float = 1.0) -> None:
    """Wait for ``driver`` to exit, then stop the session's processes (see the module doc)."""
    noted: dict[int, str | None] = {}  # pid -> start identity, of the driver's tree
    while _alive(driver):
        if not session_pids(session_dir):  # the driver shut Ray down itself
            return
        for pid in descendants(driver):
            if pid != os.getpid() and pid not in noted:
                noted[pid] = identity(pid)
        time.sleep(poll_s)

    def targets() -> list[int]:
        left = {p for p, who in noted.items() if who is not None and identity(p) == who}
        return sorted(left | set(session_pids(session_dir)))

    for sig, wait in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 0.0)):
        pids = targets()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = [p for p in pids if _alive(p)]


def start_reaper(session_dir: str) -> subprocess.Popen | None:
    """Start the watcher of this process's Ray session (None on systems without /proc)."""
    if not Path("/proc/self/cmdline").exists():
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "cmpnn_dist.cli.reaper", str(os.getpid()), session_dir],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the driver's process group leaves it running
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
