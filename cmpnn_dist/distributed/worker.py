"""The function every Ray Train worker runs: open the data, build the context, call ``fit``."""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

from . import remote
from .context import RayTrainContext

logger = logging.getLogger(__name__)

RESULT_FILE = "results.json"


def result_summary(result: Any, ctx: RayTrainContext, run_uri: str) -> dict[str, Any]:
    """The JSON summary rank 0 leaves in the run folder (read back by the driver)."""
    return {
        "run_dir": run_uri,
        "step": result.step,
        "best_step": result.best_step,
        "resumed_from_step": result.resumed_from_step,
        "resumed_from": ctx.resumed_from,
        "valid": result.best_valid,
        "test": result.test,
        "world_size": ctx.world_size,
        "timing": ctx.timer.summary() if ctx.timer.enabled else None,
        "context_timing_s": dict(ctx.timings),
    }


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``.

    ``config``: ``cfg`` (the resolved :class:`~cmpnn_dist.config.Config`), ``run_uri`` (the
    run folder, local path or URI) and ``dataset`` (the dataset folder, local path or URI).
    """
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.loop import fit

    cfg = config["cfg"]
    run_uri = config["run_uri"]
    if not cfg.cluster.use_gpu:
        # a fixed intra-op thread count keeps CPU reductions reproducible across restarts
        torch.set_num_threads(max(1, int(cfg.cluster.cpus_per_worker)))
    ctx = RayTrainContext(run_uri, resume=cfg.resume, use_gpu=cfg.cluster.use_gpu)
    try:
        data = load_train_data(open_dataset(remote.localize_dataset(config["dataset"])))
        result = fit(cfg, data, ctx, run_dir=ctx.run_dir)
        if ctx.is_main:
            summary = result_summary(result, ctx, run_uri)
            remote.write_text(remote.join(run_uri, RESULT_FILE), json.dumps(summary, indent=1))
    finally:
        ctx.close()
