"""Distributed training with real Ray Train workers and real gloo on the CPU.

All runs share one tiny rule-planted KG (60 entities) and a tiny model, deterministic CPU
settings, a global batch of 4 and 12 steps with a checkpoint every 3 steps.  The reference is
one uninterrupted 2-worker run; the other runs are compared to it:

* 1 worker with the same global batch: same loss curve and weights (float tolerance);
* a worker SIGKILLed at a random step: Ray restarts the group, weights bit-identical, every
  step exactly once in the history;
* the job process killed after a checkpoint, two newest checkpoints damaged (a truncated
  file, a missing manifest), the job submitted again with the same run_name in a fresh Ray:
  its one resume line names both, it resumes from the third and ends bit-identical;
* a stalled rank fails within the collective timeout; a failure on every attempt stops
  after max_failures retries with a clear message;
* ``ray job submit`` of the CLI against a ``ray start --head`` node;
* ``evaluate`` on the Ray run folder (same layout as in-process); a checkpoint that does not fit
  the model ends after one attempt with exit status 2.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cmpnn_dist.config import Config
from cmpnn_dist.distributed import faults
from cmpnn_dist.runs.checkpoint import MANIFEST, STATE_FILE, load_checkpoint
from cmpnn_dist.runs.checkpoint_store import ENV_SCRATCH, CheckpointStore
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.ray_head import Head
from tests.helpers.ray_run import (
    EVERY,
    MAX_STEPS,
    assert_bit_identical,
    checkpoint_candidates,
    final_state,
    make_cfg,
    train_steps,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from cmpnn_dist.convert import build_dataset

    # <store>/datasets/tiny: where evaluate finds it with storage_root=<store>
    out = tmp_path_factory.mktemp("store") / "datasets" / "tiny"
    return build_dataset(
        "synthetic:rule_kg", out, synthetic={"num_entities": 60}, num_shards=2, name="tiny"
    )


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=True)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(ray_local, dataset, tmp_path_factory) -> dict:
    from cmpnn_dist.distributed import run_distributed

    root = tmp_path_factory.mktemp("ref")
    out = run_distributed(make_cfg(root, "ref"), dataset)
    state = final_state(out["run_dir"])
    return {"summary": out, "state": state, "root": root}


def test_reference_run_is_complete(reference) -> None:
    out, state = reference["summary"], reference["state"]
    assert out["world_size"] == 2 and out["resumed_from_step"] is None
    assert out["step"] == MAX_STEPS and set(out["test"]) >= {"mrr", "hits@10"}
    assert train_steps(state["history"]) == list(range(1, MAX_STEPS + 1))
    run = Path(out["run_dir"])
    kept = [s for s, _ in checkpoint_candidates(str(run))]
    assert kept == [12, 9, 6], kept  # keep_last=3
    assert (run / "results.json").is_file() and (run / "metrics.csv").is_file()
    # the in-process layout: checkpoints/step_N and checkpoints/best, nothing else of Ray's
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["best", "step_00000006", "step_00000009", "step_00000012"], names
    assert load_checkpoint(run / "checkpoints" / "best")["step"] == out["best_step"]


def run_module(*args: str, env: dict | None = None, timeout: int = 600):
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def test_evaluate_on_a_ray_run_folder(reference, dataset) -> None:
    run = Path(reference["summary"]["run_dir"])
    store = dataset.parent.parent
    for ckpt in (run, run / "checkpoints" / "best"):
        proc = run_module("cmpnn_dist.evaluate", f"ckpt={ckpt}", f"storage_root={store}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert got["run_dir"] == str(run)
        assert got["test"]["mrr"] == pytest.approx(reference["summary"]["test"]["mrr"], abs=1e-6)


@pytest.mark.timeout(300)
def test_checkpoint_that_does_not_fit_is_not_retried(reference, dataset, tmp_path) -> None:
    """A run folder whose checkpoints were written for another model: one error line, exit
    status 2, and no attempt at all: the resume's newest checkpoint is checked before the run
    starts a worker (or prints a line), so nothing is retried."""
    root = tmp_path / "root"
    shutil.copytree(reference["root"] / "runs" / "ref", root / "runs" / "ref")
    shutil.copytree(dataset, root / "datasets" / "tiny")
    args = [
        "cmpnn_dist.train",
        f"storage_root={root}",
        "run_name=ref",
        "data.name=tiny",
        "cluster.num_workers=2",
        "cluster.max_failures=3",
        "train.batch_size=4",
        "train.progress=false",
        "model.num_layers=2",
        "model.hidden_dim=16",  # the checkpoints hold hidden_dim=8
        "model.decoder_hidden_dim=8",
    ]
    env = {faults.ENV_DIR: str(tmp_path / "faults")}
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, **env}
    start = time.monotonic()
    proc = run_module(*args, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "model.hidden_dim: 8 in the checkpoint, 16 now" in errors[0]
    log = tmp_path / "faults" / "attempts.log"
    attempts = log.read_text().split() if log.exists() else []
    assert "rank0" not in attempts and "rank1" not in attempts, attempts
    print(f"non-retryable error reported after {time.monotonic() - start:.1f} s")
    assert [s for s, _ in checkpoint_candidates(str(root / "runs" / "ref"))] == [12, 9, 6]


def test_one_worker_matches_two_workers(reference, dataset, tmp_path) -> None:
    from cmpnn_dist.distributed import run_distributed

    out = run_distributed(make_cfg(tmp_path, "one", workers=1), dataset)
    one, two = final_state(out["run_dir"]), reference["state"]
    loss1 = [r["loss"] for r in one["history"] if r["kind"] == "train"]
    loss2 = [r["loss"] for r in two["history"] if r["kind"] == "train"]
    assert len(loss1) == MAX_STEPS
    torch.testing.assert_close(torch.tensor(loss1), torch.tensor(loss2), rtol=1e-5, atol=1e-6)
    for k in two["model"]:
        torch.testing.assert_close(one["model"][k], two["model"][k], rtol=1e-4, atol=1e-5)
    assert out["world_size"] == 1


def test_worker_sigkill_resumes_bit_identical(reference, dataset, tmp_path, monkeypatch) -> None:
    from cmpnn_dist.distributed import run_distributed

    step = int(os.environ.get("CMPNN_TEST_KILL_STEP", random.randrange(2, MAX_STEPS)))
    print(f"SIGKILL of rank 1 at step {step} (rerun with CMPNN_TEST_KILL_STEP={step})")
    monkeypatch.setenv(faults.ENV_FAULT, f"kill@rank1:step{step}")
    monkeypatch.setenv(faults.ENV_DIR, str(tmp_path / "faults"))
    monkeypatch.setenv(ENV_SCRATCH, str(tmp_path / "scratch"))
    # a file:// run folder: the ranks stage and fetch checkpoints in scratch folders
    out = run_distributed(make_cfg(f"file://{tmp_path}", "killed"), dataset)
    assert (tmp_path / "faults" / f"kill-rank1-step{step}.fired").is_file()
    attempts = (tmp_path / "faults" / "attempts.log").read_text().split()
    assert attempts.count("rank1") == 2  # the worker group was restarted once
    expected_resume = ((step - 1) // EVERY) * EVERY or None
    assert out["resumed_from_step"] == expected_resume
    state = final_state(out["run_dir"])
    assert_bit_identical(state["model"], reference["state"]["model"])
    assert train_steps(state["history"]) == list(range(1, MAX_STEPS + 1))
    run = tmp_path / "runs" / "killed"
    csv_steps = [
        int(line.split(",")[1])
        for line in (run / "metrics.csv").read_text().splitlines()[1:]
        if line.startswith("train,")
    ]
    assert csv_steps == list(range(1, MAX_STEPS + 1))
    # the same files as a local run folder (TensorBoard events and ranks included)
    assert (run / "ranks_test_all.parquet").is_file() and (run / "results.json").is_file()
    assert [p.name for p in (run / "tensorboard").iterdir()]
    assert (run / "checkpoints" / "best" / "manifest.json").is_file()
    # pruning after the restart: exactly keep_last=3 checkpoints, plus best
    assert [s for s, _ in checkpoint_candidates(out["run_dir"])] == [12, 9, 6]
    # the killed worker's scratch folder was removed by the restarted group, the others by
    # their own cleanup
    assert list((tmp_path / "scratch").iterdir()) == []


DRIVER = (
    "import json, pickle, sys\n"
    "from cmpnn_dist.distributed import run_distributed\n"
    "cfg = pickle.load(open(sys.argv[1], 'rb'))\n"
    "print(json.dumps(run_distributed(cfg, sys.argv[2])), flush=True)\n"
)


def _spawn_driver(cfg: Config, dataset: Path, tmp: Path, env: dict) -> subprocess.Popen:
    path = tmp / f"cfg-{time.time_ns()}.pkl"
    path.write_bytes(pickle.dumps(cfg))
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(path), str(dataset)],
        cwd=tmp,
        env={**env, "PYTHONPATH": str(REPO)},  # this checkout, not an installed copy
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _valid_steps(run: Path) -> list[int]:
    return [s for s, uri in checkpoint_candidates(str(run)) if (Path(uri) / MANIFEST).is_file()]


@pytest.mark.timeout(420)
def test_job_killed_and_resubmitted_resumes(reference, dataset, tmp_path) -> None:
    cfg = make_cfg(tmp_path, "job")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    # rank 0 stalls at step 11 so the job is surely alive, mid-run, when it is killed
    stall_env = {**env, faults.ENV_FAULT: "stall@rank0:step11"}
    run = tmp_path / "runs" / "job"
    proc = _spawn_driver(cfg, dataset, tmp_path, stall_env)
    try:
        deadline = time.monotonic() + 240
        while 9 not in _valid_steps(run):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "no checkpoint of step 9 in time"
            time.sleep(0.2)
    finally:
        _kill_group(proc)  # the job driver and the local Ray it started
    assert not (run / "results.json").exists()
    ckpts = {s: Path(uri) for s, uri in checkpoint_candidates(str(run))}
    assert sorted(ckpts) == [3, 6, 9]
    state = ckpts[9] / STATE_FILE
    state.write_bytes(state.read_bytes()[:100])  # truncated file
    (ckpts[6] / MANIFEST).unlink()  # checkpoint without manifest

    proc = _spawn_driver(cfg, dataset, tmp_path, env)  # same run_name, fresh Ray
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, output[-5000:]
    summary = json.loads(output.strip().splitlines()[-1])
    assert output.count("resuming from step") == 1, output[-5000:]
    line = next(ln for ln in output.splitlines() if "resuming from step" in ln)
    assert f"resuming from step 3: {ckpts[3]} (the newest valid checkpoint; skipped" in line
    assert f"{ckpts[9] / STATE_FILE}: size 100 bytes" in line and "truncated" in line
    assert f"{ckpts[6] / MANIFEST}: manifest missing" in line
    assert summary["resumed_from_step"] == 3
    final = final_state(summary["run_dir"])
    assert_bit_identical(final["model"], reference["state"]["model"])
    assert train_steps(final["history"]) == list(range(1, MAX_STEPS + 1))


def test_new_name_or_resume_false_starts_fresh(reference, dataset) -> None:
    from cmpnn_dist.distributed import run_distributed

    cfg = make_cfg(reference["root"], "ref")
    cfg.resume = False
    cfg.train.max_steps = 3
    out = run_distributed(cfg, dataset)
    assert out["resumed_from_step"] is None and out["step"] == 3
    runs = reference["root"] / "runs"
    moved = [p for p in runs.iterdir() if p.name.startswith("ref.replaced-")]
    assert len(moved) == 1 and (moved[0] / "results.json").is_file()
    state = load_checkpoint(CheckpointStore(out["run_dir"]).find_latest().path)
    assert train_steps(state["history"]) == [1, 2, 3]
    first3 = [r["loss"] for r in reference["state"]["history"] if r["kind"] == "train"][:3]
    assert [r["loss"] for r in state["history"] if r["kind"] == "train"] == first3


@pytest.mark.timeout(240)
def test_stalled_rank_fails_within_timeout(ray_local, dataset, tmp_path, monkeypatch) -> None:
    from cmpnn_dist.distributed import DistributedTrainingError, run_distributed

    monkeypatch.setenv(faults.ENV_FAULT, "stall@rank1:step2")
    cfg = make_cfg(tmp_path, "stall", collective_timeout_s=5.0, max_failures=0)
    start = time.monotonic()
    with pytest.raises(DistributedTrainingError) as info:
        run_distributed(cfg, dataset)
    elapsed = time.monotonic() - start
    msg = str(info.value)
    assert "failed on 1 attempt(s)" in msg and "max_failures=0" in msg
    assert "timed out" in msg.lower() or "timeout" in msg.lower(), msg
    assert elapsed < 150, elapsed


@pytest.mark.timeout(240)
def test_retry_budget_exhaustion(ray_local, dataset, tmp_path, monkeypatch) -> None:
    from cmpnn_dist.distributed import DistributedTrainingError, run_distributed

    monkeypatch.setenv(faults.ENV_FAULT, "crash@rank0:step2:always")
    monkeypatch.setenv(faults.ENV_DIR, str(tmp_path / "faults"))
    cfg = make_cfg(tmp_path, "crash", max_failures=1)
    with pytest.raises(DistributedTrainingError) as info:
        run_distributed(cfg, dataset)
    msg = str(info.value)
    assert "failed on 2 attempt(s) (cluster.max_failures=1)" in msg
    assert "injected crash on rank 0 at step 2" in msg
    assert "run_name=crash resumes" in msg
    attempts = (tmp_path / "faults" / "attempts.log").read_text().split()
    assert attempts.count("rank0") == 2 and attempts.count("rank1") == 2


@pytest.mark.timeout(780)
def test_ray_job_submit_end_to_end(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    # Ray 2.60 turns token auth on for a head that finds ~/.ray/auth_token; clients only send
    # the token with RAY_AUTH_MODE=token, so say it on both sides (a token is made if missing)
    env["RAY_AUTH_MODE"] = "token"
    root = tmp_path / "storage"
    head = Head(env)
    try:
        done = head.submit(
            ["cluster.num_workers=2", "data.source=synthetic:rule_kg", "data.name=tiny",
             "+data.synthetic.num_entities=60", f"train.max_steps={MAX_STEPS}",
             "train.batch_size=4", "train.num_negatives=8", "train.progress=false",
             "model.num_layers=2", "model.hidden_dim=8", "eval.max_queries=8",
             f"storage_root={root}", "run_name=submitted", f"checkpoint.every_steps={EVERY}"]
        )  # fmt: skip
    finally:
        head.kill()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{") and "run_dir" in ln]
    assert lines, output[-5000:]
    summary = json.loads(lines[-1])
    assert summary["run_dir"] == str(root.resolve() / "runs" / "submitted")
    assert set(summary["test"]) >= {"mrr", "hits@10"}
    assert final_state(summary["run_dir"])["step"] == MAX_STEPS
