"""``python -m cmpnn_dist.serve`` as a process of its own session, and what it leaves running.

:class:`ServerProcess` starts the real server on a free loopback port in a new session
(``start_new_session``: every process it starts, Ray's included, inherits that session unless
it makes its own), logs its output to a file, and answers HTTP requests as JSON.
:meth:`ServerProcess.left_behind` lists what is still alive of it: the processes of its
session, the descendants seen in the last :meth:`ServerProcess.snapshot`, and its watcher
(``cmpnn_dist.cli.reaper``, in a session of its own).  Read from ``/proc``.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from cmpnn_dist.serve.launch import quiet_port
from tests.helpers.paths import REPO_ROOT as REPO


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]])}


def proc_table() -> dict[int, dict]:
    """Every live (not zombie) process: pid -> ppid, sid, start time, command line."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(d.name)] = {
                "ppid": int(fields[1]),
                "sid": int(fields[3]),
                "start": int(fields[19]),
                "cmd": cmd.strip(),
            }
    return out


def descendants(pid: int, table: dict[int, dict]) -> dict[int, dict]:
    children: dict[int, list[int]] = {}
    for p, row in table.items():
        children.setdefault(row["ppid"], []).append(p)
    out, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out[p] = table[p]
        todo.extend(children.get(p, []))
    return out


class ServerProcess:
    """The server on ``ckpt`` with the extra ``key=value`` arguments ``args``."""

    def __init__(self, ckpt: Path, log: Path, *args: str) -> None:
        self.port = quiet_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        cmd = [sys.executable, "-m", "cmpnn_dist.serve", f"ckpt={ckpt}", f"serve.port={self.port}"]
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [*cmd, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=server_env(),
                start_new_session=True,
            )
        self.seen: dict[int, dict] = {}

    def request(
        self, method: str, path: str, body: object = None, timeout: float = 300
    ) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def ready(self) -> bool:
        try:
            return self.request("GET", "/health", timeout=30)[1].get("status") == "ok"
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def processes(self) -> dict[int, dict]:
        """The live processes of its session and its descendants (the server excluded)."""
        table = proc_table()
        mine = {p: r for p, r in table.items() if r["sid"] == self.proc.pid}
        mine.update(descendants(self.proc.pid, table))
        mine.pop(self.proc.pid, None)
        return mine

    def snapshot(self) -> dict[int, dict]:
        """Remember (and return) :meth:`processes` now, for :meth:`left_behind`."""
        self.seen.update(self.processes())
        return self.seen

    def left_behind(self) -> list[str]:
        """What is alive of it after its exit (pid and command line)."""
        table = proc_table()
        alive = {p: r for p, r in table.items() if r["sid"] == self.proc.pid}
        alive.update(
            (p, r) for p, r in self.seen.items() if table.get(p, {}).get("start") == r["start"]
        )
        watcher = f"cmpnn_dist.cli.reaper {self.proc.pid} "
        alive.update((p, r) for p, r in table.items() if watcher in r["cmd"] + " ")
        return [f"{p} {r['cmd'][:120]}" for p, r in sorted(alive.items())]

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float) -> None:
        """Poll ``condition`` until true; fail naming ``what`` when the server exits first."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the server exited ({self.proc.returncode}) before {what}: "
                    f"{self.log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout} s: {self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def output(self) -> list[str]:
        return self.log.read_text().splitlines()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)
