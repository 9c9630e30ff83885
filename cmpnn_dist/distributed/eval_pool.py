"""``run_distributed_evaluation``: rank a checkpoint's valid / test splits on Ray workers.

Each of ``cluster.num_workers`` Ray Train workers (gloo on CPU, nccl on GPU) takes the
checkpoint's state the driver read (through Ray's object store: the checkpoint folder of a
live run may be pruned meanwhile), loads the dataset, scores every ``world_size``-th batch of
(node, relation) groups and all-gathers the ranks (:func:`cmpnn_dist.evaluation.rank_split`),
so every worker holds the same full result, equal rank for rank to a one-process run.  Rank 0
writes the per-query Parquet tables into the staging folder ``evaluate`` gives it (published
all together after success) and a JSON summary the driver reads back.  A lost worker is
retried like training (``cluster.max_failures``): the worker group ranks again from the start.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray.train
import torch

from cmpnn_dist.storage.atomic import write_atomic

from . import faults
from .context import all_gather_rows
from .local_ray import ray_host, torch_config

SUMMARY = "eval_summary.json"


class EvalContext:
    """Rank, world size and row all-gather of one Ray Train worker (evaluation only)."""

    def __init__(self, device: torch.device) -> None:
        tc = ray.train.get_context()
        self.rank, self.world_size, self.device = tc.get_world_rank(), tc.get_world_size(), device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        return all_gather_rows(t, self.device) if self.world_size > 1 else t


def eval_worker(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker`` for evaluation."""
    from cmpnn_dist.runs.restore import model_from_state
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.validation import evaluate_splits

    cfg = config["cfg"]
    if cfg.cluster.use_gpu:
        from ray.train.torch import get_device

        device = get_device()
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(cfg.cluster.cpus_per_worker)))
    ctx = EvalContext(device)
    state = ray.get(config["state"])  # read once by the driver (a live run may prune it)
    data = load_train_data(config["dataset"], cfg.eval.filter)
    model = model_from_state(
        cfg, state, config["weights"], data.num_relations, data.num_nodes, data.inductive
    )
    faults.install(
        model, ctx.rank, evaluation=True
    )  # CMPNN_FAULT drills (kill a worker mid-evaluation)
    out = evaluate_splits(model, data, cfg, device, ctx=ctx, ranks_dir=Path(config["run_dir"]))
    if ctx.is_main:
        write_atomic(Path(config["summary"]), json.dumps({**out, "world_size": ctx.world_size}))


def run_distributed_evaluation(
    cfg: Any, state: dict[str, Any], weights: str, dataset: Path, run_dir: Path
) -> dict[str, Any]:
    """Evaluate a checkpoint's ``state`` (read by the caller, handed to the workers through
    Ray's object store) on ``cluster.num_workers`` Ray workers; returns
    ``{"valid": metrics, "test": metrics, "world_size": n}`` (local paths only)."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from .driver import (
        DistributedTrainingError,
        _first_lines,
        _init_ray,
        _worker_env,
        backend_for,
    )

    cl = cfg.cluster
    scratch = Path(tempfile.mkdtemp(prefix="cmpnn-eval-"))
    resources = {"CPU": float(cl.cpus_per_worker)}
    if cl.use_gpu:
        resources["GPU"] = float(cl.gpus_per_worker)
    started = _init_ray(cfg)
    try:
        trainer = TorchTrainer(
            eval_worker,
            train_loop_config={
                "cfg": cfg,
                "state": ray.put(state),
                "weights": weights,
                "dataset": str(Path(dataset).resolve()),
                "run_dir": str(Path(run_dir).resolve()),
                "summary": str(scratch / SUMMARY),
            },
            torch_config=torch_config(
                backend_for(cfg), max(1, math.ceil(cl.collective_timeout_s)), ray_host()
            ),
            scaling_config=ScalingConfig(
                num_workers=cl.num_workers, use_gpu=cl.use_gpu, resources_per_worker=resources
            ),
            run_config=RunConfig(
                name="evaluate",
                storage_path=str(scratch / "ray"),
                # a lost worker is transient: the whole group ranks again (its outputs are
                # staged and published by the caller only after success), as training does
                failure_config=FailureConfig(max_failures=cl.max_failures),
                worker_runtime_env={"env_vars": _worker_env()},
            ),
        )
        try:
            trainer.fit()
        except ray.train.TrainingFailedError as e:
            attempts = "every" if cl.max_failures < 0 else str(cl.max_failures + 1)
            last = _first_lines(str(e), 1)
            raise DistributedTrainingError(
                f"distributed evaluation failed on {attempts} attempt(s) "
                f"(cluster.max_failures={cl.max_failures}); nothing was written; last error: "
                f"{last}"
            ) from e
        summary = scratch / SUMMARY
        if not summary.is_file():
            raise DistributedTrainingError("evaluation finished but rank 0 left no summary")
        return json.loads(summary.read_text())
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
