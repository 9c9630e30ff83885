"""A Ray that cannot be started or reached is one ``error:`` line and exit status 2, for a
training run with workers and for a sweep (issue 22: "a Ray start-up timeout in a sweep (exit
1, no hint)"), and a run folder the failed start created is not left behind.

The failures are real and cheap: ``RAY_gcs_server_port_wait_time_s=0`` makes Ray's own local
start time out at once (the GCS port file cannot be there yet), and ``RAY_ADDRESS`` names a
port where nothing listens (Ray itself would retry that address for many minutes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmpnn_dist.serve.launch import quiet_port
from tests.helpers.paths import REPO_ROOT as REPO

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests

TINY = [
    "data.name=rk60",
    "+data.synthetic.num_entities=60",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "train.max_steps=4",
    "train.batch_size=4",
    "train.progress=false",
]


def _dead_address() -> str:
    # a port free a moment ago, outside the ranges a Ray starting beside the tests draws from:
    # nothing listens there
    return f"127.0.0.1:{quiet_port()}"


def _run(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    return subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", *TINY, *args],
        capture_output=True, text=True, cwd=REPO, timeout=240,
        env={**base, "OMP_NUM_THREADS": "1", **env},
    )  # fmt: skip


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert proc.stdout.strip() == ""  # no summary JSON
    return errors[0]


KINDS = {
    "train": ["cluster.num_workers=1", "run_name=r"],
    "sweep": ["-m", "train.seed=0,1", "sweep_name=s"],
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_local_ray_start_up_timeout_is_one_line(kind, tmp_path):
    proc = _run(KINDS[kind], tmp_path, {"RAY_gcs_server_port_wait_time_s": "0"})
    line = _one_error_line(proc)
    assert line.startswith("error: could not start a local Ray cluster (RuntimeError: "), line
    assert "Timed out" in line and "RAY_gcs_server_port_wait_time_s=120" in line, line
    assert not (tmp_path / "runs" / "r").exists()  # the failed start left no run folder


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_ray_address_where_nothing_listens_is_one_line(kind, tmp_path):
    address = _dead_address()
    start = time.monotonic()
    proc = _run(KINDS[kind], tmp_path, {"RAY_ADDRESS": address})
    line = _one_error_line(proc)
    assert line.startswith(f"error: RAY_ADDRESS={address}: no Ray cluster answers at "), line
    assert "ray start --head" in line, line
    assert time.monotonic() - start < 120
    assert not (tmp_path / "runs" / "r").exists()
