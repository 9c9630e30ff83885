"""A real ``ray start --head --block`` node for the tests that need a separate cluster (``ray
job submit``, a sweep driven from the shell), stopped by killing its own process group only.

``ray stop --force`` would stop every Ray cluster on the machine, including a user's
long-running sweep beside the tests; this head, its raylet, job drivers and workers all share
the process group it was started in, so ``kill`` ends exactly this cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from cmpnn_dist.serve.launch import quiet_port
from tests.helpers.paths import REPO_ROOT as REPO


def wait_for(predicate, timeout: float, what: str, alive=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if alive is not None:
            alive()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


class Head:
    """A two-CPU head node with a job server on free local ports; ``address`` is the job
    server's, ``gcs_address`` the one a driver's ``RAY_ADDRESS`` names."""

    def __init__(self, env: dict) -> None:
        self.env = env
        # six different ports: each draw of quiet_port is only checked free, not held
        ports: set[int] = set()
        while len(ports) < 6:
            ports.add(quiet_port())
        self.port, self.dash, agent_listen, agent_grpc, runtime_env, metrics = ports
        self.temp_dir = tempfile.mkdtemp(prefix="rayh", dir="/tmp")  # short: socket paths
        self.proc = subprocess.Popen(
            ["ray", "start", "--head", "--block", "--num-cpus=2", f"--port={self.port}",
             "--include-dashboard=true", "--dashboard-host=127.0.0.1",
             f"--dashboard-port={self.dash}",
             # own agent ports: another local Ray (a test module's, a user's sweep) may hold
             # the defaults, and an agent that cannot bind never registers
             f"--dashboard-agent-listen-port={agent_listen}",
             f"--dashboard-agent-grpc-port={agent_grpc}",
             f"--runtime-env-agent-port={runtime_env}",
             f"--metrics-export-port={metrics}", f"--temp-dir={self.temp_dir}",
             "--disable-usage-stats"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        self.address = f"http://127.0.0.1:{self.dash}"
        self.gcs_address = f"127.0.0.1:{self.port}"
        try:
            wait_for(self._answers, 120, "the head node's job server", alive=self.check)
        except BaseException:
            self.kill()
            raise

    def _answers(self) -> bool:
        cmd = ["ray", "job", "list", "--address", self.address]
        return subprocess.run(cmd, env=self.env, capture_output=True).returncode == 0

    def check(self) -> None:
        assert self.proc.poll() is None, "ray start --head exited"

    def submit(self, args: list[str], *, no_wait: bool = False, env_vars: dict | None = None):
        """``ray job submit --working-dir REPO -- python -m cmpnn_dist.train ARGS``."""
        cmd = ["ray", "job", "submit", "--address", self.address, "--working-dir", str(REPO)]
        if no_wait:
            cmd.append("--no-wait")
        if env_vars:
            cmd += ["--runtime-env-json", json.dumps({"env_vars": env_vars})]
        cmd += ["--", "python", "-m", "cmpnn_dist.train", *args]
        deadline = time.monotonic() + 300
        while True:  # the job server answers before the node's agent registers
            done = subprocess.run(
                cmd, env=self.env, capture_output=True, text=True, cwd=REPO, timeout=500
            )
            output = done.stdout + done.stderr
            if done.returncode == 0 or "No available agent" not in output:
                return done
            self.check()
            assert time.monotonic() < deadline, "no job agent registered in 300 s"
            time.sleep(5)

    def kill(self) -> None:
        """This cluster goes away (head, raylet, job drivers and workers), no other."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)
