"""The listening sockets of a process tree, read from ``/proc`` (Linux).

``listening(pids)`` joins each process's socket inodes (``/proc/<pid>/fd`` links
``socket:[N]``) with the kernel's socket tables of its network namespace
(``/proc/<pid>/net/{tcp,tcp6,udp,udp6}``): TCP sockets in state LISTEN and UDP sockets bound
to a port.  ``Watch`` samples a process and all its descendants in a thread while it runs, so
short-lived processes (Ray workers, DDP's rendezvous store) are seen too.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
import time
from pathlib import Path
from typing import NamedTuple

TCP_LISTEN = "0A"


class Listener(NamedTuple):
    pid: int
    name: str  # /proc/<pid>/comm
    proto: str  # tcp, tcp6, udp, udp6
    host: str
    port: int


def _address(field: str) -> tuple[str, int]:
    """``0100007F:1F90`` (the kernel's hex, 32-bit words in host order) -> ("127.0.0.1", 8080)."""
    hexip, hexport = field.split(":")
    raw = bytes.fromhex(hexip)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words), int(hexport, 16)


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def listening(pids: list[int]) -> list[Listener]:
    """The TCP sockets in LISTEN and the bound UDP sockets the processes ``pids`` hold."""
    out = []
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        for proto in ("tcp", "tcp6", "udp", "udp6"):
            try:
                rows = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                f = row.split()
                if int(f[9]) not in inodes:
                    continue
                host, port = _address(f[1])
                if (proto.startswith("tcp") and f[3] == TCP_LISTEN) or (
                    proto.startswith("udp") and port
                ):
                    out.append(Listener(pid, name, proto, host, port))
    return out


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (by parent pid)."""
    from cmpnn_dist.distributed.reaper import descendants as below

    return {pid, *below(pid)}


def is_loopback(host: str) -> bool:
    addr = ipaddress.ip_address(host)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


class Watch:
    """Samples the listeners of ``pid``'s process tree every ``every_s`` until :meth:`stop`."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid, self.every_s = pid, every_s
        # keyed by name too: a Ray worker that listens as ``ray::IDLE`` keeps its port when it
        # becomes an actor and takes the actor's name, and both names are what it was
        self.seen: dict[tuple[int, str, str, str, int], Listener] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            for entry in listening(sorted(descendants(self.pid))):
                key = (entry.pid, entry.name, entry.proto, entry.host, entry.port)
                self.seen.setdefault(key, entry)
            time.sleep(self.every_s)

    def stop(self) -> list[Listener]:
        self._done.set()
        self._thread.join()
        return list(self.seen.values())

    @staticmethod
    def exposed(listeners: list[Listener]) -> list[str]:
        """The listeners not on a loopback address, one readable line each."""
        return [
            f"{x.name} (pid {x.pid}) {x.proto} {x.host}:{x.port}"
            for x in listeners
            if not is_loopback(x.host)
        ]
