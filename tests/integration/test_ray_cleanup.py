"""A driver that started its own Ray and is SIGKILLed leaves no Ray process behind.

A child process starts a local Ray exactly as ``run_distributed`` does (``_init_ray``) and is
killed with SIGKILL; every process of its Ray session (raylet, GCS, dashboard and runtime-env
agents, workers: found by the session folder on their command lines) must be gone soon after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cmpnn_dist.distributed.reaper import session_pids
from tests.helpers.paths import REPO_ROOT as REPO

CHILD = textwrap.dedent(
    """
    import time, ray
    from cmpnn_dist.config import Config
    from cmpnn_dist.distributed.driver import _init_ray

    cfg = Config()
    cfg.cluster.num_workers = 1
    _init_ray(cfg)
    print(ray._private.worker._global_node.get_session_dir_path(), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_a_sigkilled_driver_leaves_no_ray_process():
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env["PYTHONPATH"] = str(REPO)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        session = child.stdout.readline().strip()
        assert session and session_pids(session), "Ray did not start"
        time.sleep(3)  # let the agents come up
        assert len(session_pids(session)) >= 2
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.time() + 60
    while session_pids(session) and time.time() < deadline:
        time.sleep(0.5)
    assert session_pids(session) == []
