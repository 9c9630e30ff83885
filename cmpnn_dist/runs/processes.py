"""Is the process that wrote a lock still running?  A pid alone does not say.

Once a process is gone the kernel may give its pid to a new one (after a reboot, or when the
pid counter wraps), and a lock that names only the pid would then look held by an unrelated
process for as long as that one lives.  On Linux a process is named exactly by the boot it
runs in and its start time (``/proc/sys/kernel/random/boot_id`` and field 22 of
``/proc/<pid>/stat``, in clock ticks since boot): :func:`identity`.  A lock records it beside
the pid, and :func:`still_running` compares it with the process that has the pid now.

A lock written without it (by an earlier version of this package) has only its wall-clock
``started`` time: a process with the pid that began more than :data:`REUSE_MARGIN_S` after
the lock was written cannot have written it.  The margin keeps a small clock step from
taking a live run's lock.  Where ``/proc`` cannot be read (another OS) the pid alone decides.
"""

from __future__ import annotations

import os
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
REUSE_MARGIN_S = 60.0


def pid_alive(pid: int) -> bool:
    """Whether a process with pid ``pid`` runs on this machine (any process: see
    :func:`still_running` for the one that wrote a lock); a zombie (exited, not yet reaped by
    its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (another OS): the pid decides
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: the start time in clock ticks since boot."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses itself
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def identity(pid: int) -> str | None:
    """``"<boot id>/<start ticks>"`` of the running process ``pid``: with the pid, it names
    one process of one machine for good (a later process given the same pid starts later, a
    process of another boot has another boot id).  None where it cannot be read (not Linux,
    or no such process)."""
    ticks = _start_ticks(pid)
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        return None
    return None if ticks is None else f"{boot}/{ticks}"


def started_at(pid: int) -> float | None:
    """When the running process ``pid`` started, in seconds since the epoch (the boot time of
    ``/proc/stat`` plus its start ticks); None where it cannot be read."""
    ticks = _start_ticks(pid)
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    boot = next((float(line.split()[1]) for line in lines if line.startswith("btime ")), None)
    if ticks is None or boot is None:
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def still_running(pid: int, recorded: str | None = None, written: float | None = None) -> bool:
    """Whether the process that wrote a lock still runs: ``pid`` is alive and, where the lock
    recorded its writer's :func:`identity` (``recorded``), the process with that pid now has
    the same one; a lock without it but with its wall-clock time (``written``) is held unless
    the pid's process began more than :data:`REUSE_MARGIN_S` later."""
    if not pid_alive(pid):
        return False
    if recorded is not None:
        now = identity(pid)
        return now is None or now == recorded
    began = started_at(pid)
    return written is None or began is None or began <= written + REUSE_MARGIN_S
