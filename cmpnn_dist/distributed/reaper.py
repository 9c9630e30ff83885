"""Stop the Ray processes a driver started when the driver dies without stopping them.

``ray.init(address="local")`` starts a GCS server, a raylet and their agents (the dashboard
agent, the runtime-env agent...).  ``ray.shutdown()`` stops them; a driver killed with SIGKILL
(or the OOM killer) never runs it, and the agents were seen to outlive it.  So a driver that
starts its own Ray also starts this watcher (:func:`start_reaper`): a small process in its own
session that polls the driver's pid once a second.  When the driver is gone it sends SIGTERM
(then, 5 s later, SIGKILL) to every process whose command line names the Ray *session folder
of that driver* (``--session-dir=...``/``--session_dir=...``: unique to that cluster), each by
its pid; it exits by itself once no such process is left (after a normal ``ray.shutdown()``).

``python -m cmpnn_dist.distributed.reaper DRIVER_PID SESSION_DIR``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


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


def watch(driver: int, session_dir: str, poll_s: float = 1.0) -> None:
    """Wait for ``driver`` to exit, then stop the session's processes (see the module doc)."""
    while _alive(driver):
        if not session_pids(session_dir):  # the driver shut Ray down itself
            return
        time.sleep(poll_s)
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        pids = session_pids(session_dir)
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
        [sys.executable, "-m", "cmpnn_dist.distributed.reaper", str(os.getpid()), session_dir],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the driver's process group leaves it running
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2])
