"""Run folders that outlive the cluster, and two Ray nodes on this machine (slow).

* ``ray job submit --working-dir`` with the *default* storage root (``HOME`` points into the
  test folder, so the default ``~/cmpnn_dist/storage`` lands there and not in Ray's temporary
  session folder): the job is stopped mid-run by killing the whole cluster, a new cluster is
  started (a new session folder) and the same command resumes from the last checkpoint;
* a two-node cluster (``ray.cluster_utils.Cluster``, one CPU per node, so the two workers land
  on different nodes): the node holding a worker is removed mid-run, a new node joins, Ray
  restarts the worker group and the run resumes and finishes with every step exactly once.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from cmpnn_dist.distributed import faults
from cmpnn_dist.runs.checkpoint import MANIFEST, load_checkpoint
from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from tests.helpers.ray_head import Head, wait_for  # noqa: E402
from tests.helpers.ray_run import (  # noqa: E402
    EVERY,
    MAX_STEPS,
    final_state,
    make_cfg,
    train_steps,
)

pytestmark = pytest.mark.slow


def valid_steps(run: Path) -> list[int]:
    return [s for s, uri in CheckpointStore(run).candidates() if (Path(uri) / MANIFEST).is_file()]


JOB_ARGS = [
    "cluster.num_workers=2",
    "data.source=synthetic:rule_kg",
    "data.name=tiny",
    "+data.synthetic.num_entities=60",
    f"train.max_steps={MAX_STEPS}",
    "train.batch_size=4",
    "train.num_negatives=8",
    "train.progress=false",
    "train.deterministic=true",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "eval.max_queries=8",
    f"checkpoint.every_steps={EVERY}",
    "run_name=sub",
]


@pytest.mark.timeout(1200)
def test_resubmission_after_a_cluster_restart_resumes(tmp_path) -> None:
    pytest.importorskip("aiohttp", reason="ray job submit needs ray[default] (the dashboard)")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    # a fresh HOME holds no ~/.ray/auth_token, so this cluster runs without token auth
    env.update({"HOME": str(home), "OMP_NUM_THREADS": "1"})
    run = home / "cmpnn_dist" / "storage" / "runs" / "sub"  # the default storage root
    head = Head(env)
    try:
        # rank 0 stalls at step 11, so the job is surely alive after checkpoint 9
        done = head.submit(
            JOB_ARGS, no_wait=True, env_vars={faults.ENV_FAULT: "stall@rank0:step11"}
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        wait_for(lambda: 9 in valid_steps(run), 400, "checkpoint 9", alive=head.check)
    finally:
        head.kill()
    assert not (run / "results.json").exists()
    assert valid_steps(run) == [9, 6]  # keep_last=2

    head = Head(env)  # a new cluster: a new session folder, the old one is gone
    try:
        done = head.submit(JOB_ARGS)
    finally:
        head.kill()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert f"run folder: {run}  (storage_root {run.parent.parent}, default)" in output
    assert output.count("resuming from step") == 1 and "resuming from step 9" in output
    summary = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["run_dir"] == str(run) and summary["resumed_from_step"] == 9
    state = final_state(str(run))
    assert train_steps(state["history"]) == list(range(1, MAX_STEPS + 1))


@pytest.fixture
def two_nodes():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.timeout(900)
def test_two_nodes_survive_losing_a_worker_node(two_nodes, tmp_path, monkeypatch) -> None:
    import ray

    from cmpnn_dist.convert import build_dataset
    from cmpnn_dist.distributed import run_distributed

    dataset = build_dataset(
        "synthetic:rule_kg",
        tmp_path / "store" / "datasets" / "tiny",
        synthetic={"num_entities": 60},
        num_shards=2,
        name="tiny",
    )
    monkeypatch.setenv(faults.ENV_FAULT, "stall@rank0:step11")  # once: alive after ckpt 9
    monkeypatch.setenv(faults.ENV_DIR, str(tmp_path / "faults"))
    cfg = make_cfg(tmp_path, "multi", max_failures=2)
    cfg.cluster.address = two_nodes.address
    result: dict = {}

    def target() -> None:
        try:
            result["out"] = run_distributed(cfg, dataset)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    run = tmp_path / "runs" / "multi"
    wait_for(lambda: 9 in valid_steps(run) or not thread.is_alive(), 600, "checkpoint 9")
    assert thread.is_alive(), result
    head_node = ray.get_runtime_context().get_node_id()  # the driver's node (and the head's)
    first = (tmp_path / "faults" / "attempts.log").read_text().split()
    nodes = {first[i]: first[i + 2][len("node") :] for i in range(0, len(first), 3)}
    assert set(nodes) == {"rank0", "rank1"} and nodes["rank0"] != nodes["rank1"], nodes
    victim = next(n for n in two_nodes.worker_nodes if n.node_id != head_node)
    assert victim.node_id in nodes.values()
    two_nodes.remove_node(victim)  # the node holding a worker goes away
    two_nodes.add_node(num_cpus=1)  # and a replacement joins
    thread.join(timeout=600)
    assert not thread.is_alive(), "the run did not finish after the node loss"
    assert "error" not in result, result.get("error")
    out = result["out"]
    assert out["resumed_from_step"] == 9 and out["step"] == MAX_STEPS
    state = final_state(out["run_dir"])
    assert train_steps(state["history"]) == list(range(1, MAX_STEPS + 1))
    attempts = (tmp_path / "faults" / "attempts.log").read_text().split()
    second = {attempts[i]: attempts[i + 2] for i in range(6, len(attempts), 3)}
    assert len(attempts) == 12 and second["rank0"] != second["rank1"], attempts
    assert load_checkpoint(run / "checkpoints" / "best")["step"] == out["best_step"]
