"""Everything the project's Ray starts listens on the loopback interface only.

The reader (``tests/helpers/sockets.py``) is checked against sockets this test binds itself.  Then
each kind of Ray the project starts runs as a real command in its own process: training with
``cluster.num_workers=2`` (a local Ray, Ray Train, DDP over gloo), the distributed
``evaluate`` of that run and batch scoring on Ray actors; a thread samples the listening
sockets of the command's whole process tree (driver, GCS, raylet, agents, workers, DDP's
rendezvous store) every 0.2 s while it runs, and any socket on another address fails the
test.  The server's Ray is checked the same way in ``tests/integration/test_serve.py``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.sockets import Watch, is_loopback, listening


def test_the_reader_sees_the_sockets_it_should() -> None:
    tcp4, tcp6, udp, idle = (
        socket.socket(socket.AF_INET),
        socket.socket(socket.AF_INET6),
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        socket.socket(socket.AF_INET),
    )
    try:
        tcp4.bind(("127.0.0.1", 0))
        tcp4.listen()
        tcp6.bind(("::1", 0))
        tcp6.listen()
        udp.bind(("127.0.0.1", 0))
        idle.bind(("127.0.0.1", 0))  # bound, not listening: not a listener
        got = {(x.proto, x.host, x.port) for x in listening([os.getpid()])}
        assert ("tcp", "127.0.0.1", tcp4.getsockname()[1]) in got
        assert ("tcp6", "::1", tcp6.getsockname()[1]) in got
        assert ("udp", "127.0.0.1", udp.getsockname()[1]) in got
        assert not any(port == idle.getsockname()[1] for _, _, port in got)
    finally:
        for s in (tcp4, tcp6, udp, idle):
            s.close()
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "127.3.4.5")] == [
        True
    ] * 4
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "192.0.2.2", "::ffff:192.0.2.2")] == [
        False
    ] * 4


def _watched(args: list[str], cwd: Path, timeout: int = 600) -> tuple[str, list]:
    """Run ``python -m ARGS``, sampling its process tree's listeners; (stdout, listeners)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "CMPNN_"))}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=cwd, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    watch = Watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        seen = watch.stop()
    assert proc.returncode == 0, err[-3000:]
    return out, seen


def _names(listeners: list) -> set[str]:
    return {x.name for x in listeners}


AGENTS = {"ray::DashboardA", "ray::RuntimeEnv"}


def _workers(listeners: list) -> set[str]:
    """Names of the Ray worker processes seen (a worker's name follows what it runs)."""
    return {n for n in _names(listeners) if n.startswith("ray::") and n not in AGENTS}


TINY = [
    "data.name=tiny", "data.source=synthetic:rule_kg", "+data.synthetic.num_entities=60",
    "model.num_layers=2", "model.hidden_dim=8", "model.decoder_hidden_dim=8",
    "ops.impl=reference", "train.batch_size=4", "train.num_negatives=8", "train.max_steps=4",
    "checkpoint.every_steps=2", "eval.max_queries=8", "eval.batch_size=8",
    "train.progress=false", "cluster.num_workers=2", "cluster.collective_timeout_s=120",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, list]:
    root = tmp_path_factory.mktemp("loopback")
    args = ["cmpnn_dist.train", *TINY, f"storage_root={root}", "run_name=lo"]
    out, seen = _watched(args, root)
    return Path(json.loads(out.strip().splitlines()[-1])["run_dir"]), seen


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_distributed_training_listens_on_loopback_only(trained) -> None:
    _, seen = trained
    # the watch saw the Ray it checks: its services, and DDP's store and gloo in the workers
    assert {"gcs_server", "raylet"} <= _names(seen), sorted(_names(seen))
    assert "ray::RayTrainWo" in _names(seen), sorted(_names(seen))
    assert Watch.exposed(seen) == []


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_distributed_evaluation_listens_on_loopback_only(trained) -> None:
    run, _ = trained
    args = ["cmpnn_dist.evaluate", f"ckpt={run}", "cluster.num_workers=2", "eval.max_queries=8"]
    _, seen = _watched(args, run.parent)
    assert {"gcs_server", "raylet"} <= _names(seen) and _workers(seen), sorted(_names(seen))
    assert Watch.exposed(seen) == []


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_batch_scoring_listens_on_loopback_only(trained, tmp_path) -> None:
    run, _ = trained
    args = [
        "cmpnn_dist.predict.batch", f"ckpt={run}", "relation=t0", "heads=type:A", "top_k=3",
        f"out={tmp_path / 'scores'}", "cluster.num_workers=1", "progress=false",
    ]  # fmt: skip
    _, seen = _watched(args, tmp_path)
    assert {"gcs_server", "raylet"} <= _names(seen), sorted(_names(seen))
    assert Watch.exposed(seen) == []
