"""The per-worker training loop :func:`fit` (single process here; Ray runs it per DDP worker).

One step (``B`` = global batch, ``b = B / world_size`` this worker's share, ``k`` negatives)::

    batch        = sampler.next_batch()                    queries [b,3], negatives [b,k]
    edge_mask    = graph.query_edge_mask(global queries [B,3], mode, global negatives [B,k])
    logits       = model(graph, h [b], r [b], edge_mask)   [b, N]
    loss         = self_adversarial_bce(logits[i, t_i], logits[i, negatives_i], alpha)
    Adam step (DDP averages the gradients over workers, so the update equals a 1-worker run)

Epochs run until ``train.epochs`` or the ``train.max_steps`` budget.  After each epoch every
rank validates on the *whole* validation split (same numbers everywhere, so no broadcast is
needed and every rank makes the same best-model decision; wall time equals rank-0-only).
``train.deterministic`` turns on ``torch.use_deterministic_algorithms`` and one intra-op
thread for the duration of fit (both restored afterwards).  Otherwise, on CPU, the intra-op
thread count is ``train.num_threads`` or, when null, chosen and kept current by
:class:`~cmpnn_dist.training.threads.ThreadGovernor` (restored afterwards too); where the
run's floats do not depend on the thread count (:mod:`.reproducibility`) the governor
follows the load, elsewhere it fixes the count for the run.  What the run depends on is
recorded in ``results.json`` and every checkpoint (``"reproducibility"``).
Evaluation runs inside :func:`isolated_rng`, so it never perturbs the training RNG stream.
The best weights by valid MRR are kept; at the end they are tested.

Checkpoints (main rank) every ``checkpoint.every_steps`` steps, at each epoch end and when the
step budget ends training mid-epoch hold: model, optimizer, scheduler (None), sampler state,
every RNG state, the resolved config, the history, best weights and metrics, step, epoch.
If ``ctx.latest_checkpoint()`` names one, training resumes from it exactly: on CPU, with
``train.deterministic`` or in a thread-invariant run at any thread count, an
interrupted-and-resumed run ends with bit-identical weights and a history with every step
exactly once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cmpnn_dist.storage.atomic import write_atomic

from .context import LocalContext, TrainContext, resolve_device
from .data import TrainData
from .rng import seed_everything
from .threads import governor_for
from .trainer import FitResult, Trainer
from .validation import evaluate_split

__all__ = ["FitResult", "evaluate_split", "fit", "default_run_dir"]


def default_run_dir(cfg: Any) -> str:
    """``<storage_root>/runs/<run name>`` (:func:`~cmpnn_dist.runs.folder.default_run_name`)."""
    from cmpnn_dist.runs.folder import default_run_name, run_folder

    return run_folder(str(cfg.storage_root), default_run_name(cfg))


def fit(
    cfg: Any,
    data: TrainData,
    ctx: TrainContext | None = None,
    run_dir: str | Path | None = None,
    on_step: Callable[[int], None] | None = None,
    stop_source: Callable[[], int | None] | None = None,
) -> FitResult:
    """Train a C-MPNN on ``data`` as configured by ``cfg`` (a ``Config`` or its DictConfig).

    Args:
        cfg: the full config (``cfg.model``, ``cfg.ops``, ``cfg.train``, ``cfg.eval``,
            ``cfg.checkpoint``).
        data: tensors of the run (:func:`cmpnn_dist.training.data.load_train_data`).
        ctx: where the loop runs; None builds a :class:`LocalContext` on ``run_dir``
            (default ``<storage_root>/runs/<run_name or timestamp>``).
        on_step: called with the step number after each step's bookkeeping (checkpoint,
            validation) is done; tests raise from it to simulate a crash.
        stop_source: with ``ctx`` None, stop requests made outside this process (a sweep's
            cell: its driver's; see :class:`LocalContext`).

    Returns:
        :class:`FitResult`; ``model`` carries the best weights (by valid MRR).
    """
    tc = cfg.train
    own_ctx = ctx is None
    if ctx is None:
        run_dir = run_dir if run_dir is not None else default_run_dir(cfg)
        ctx = LocalContext(
            run_dir,
            device=resolve_device(tc.device),
            keep_last=cfg.checkpoint.keep_last,
            resume=cfg.resume,
            stop_source=stop_source,
        )
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    threads = torch.get_num_threads()
    seed_everything(tc.seed)
    if tc.deterministic:
        # CPU float reductions split work by thread count: one thread makes a run (and its
        # resumption in another process) bit-reproducible whatever the machine's core count.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # on CUDA an op without a deterministic kernel warns instead of failing the run
        torch.use_deterministic_algorithms(True, warn_only=ctx.device.type != "cpu")
        torch.set_num_threads(1)
    step_hook, governor = on_step, None
    if ctx.device.type == "cpu":  # intra-op threads from train.num_threads / free cores
        governor = governor_for(cfg, data, ctx.world_size)

        def step_hook(step: int) -> None:
            governor.update()
            if on_step is not None:
                on_step(step)

    try:
        result = Trainer(cfg, data, ctx, step_hook, governor).run()
        if result.run_dir is None and run_dir is not None:
            result.run_dir = run_dir
        local_dir = getattr(ctx, "run_dir", None)  # the local folder (or mirror) of the run
        if ctx.is_main and local_dir is not None and result.run_dir is not None:
            _write_json(
                Path(local_dir) / "results.json",
                {
                    "run_dir": str(result.run_dir),
                    "step": result.step,
                    "best_step": result.best_step,
                    "resumed_from_step": result.resumed_from_step,
                    "valid": result.best_valid,
                    "test": result.test,
                    "reproducibility": governor.record() if governor is not None else None,
                },
            )
        return result
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
        torch.set_num_threads(threads)
        if own_ctx:
            ctx.close()


def _write_json(path: Path, obj: Any) -> None:
    """Whole or not at all; no space left is one error naming ``path``."""
    write_atomic(path, json.dumps(obj, indent=1))
