"""Single-process training core: data, sampler, loss, checkpoints, contexts and ``fit``.

See docs/design.md; the Ray workers run :func:`fit` with their own ``TrainContext``.
Importing this package loads none of its modules: the names below load theirs on first use,
so reading a checkpoint (``training.restore``, for ``predict`` and ``evaluate``) brings in
the checkpoint code and the model, not the loop, the sampler or the trainer.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_MODULE_OF = {
    "Batch": "sampler",
    "CheckpointError": "checkpoint",
    "CheckpointStore": "checkpoint_store",
    "FitResult": "loop",
    "LocalContext": "context",
    "QuerySampler": "sampler",
    "SplitData": "data",
    "TrainContext": "context",
    "TrainData": "data",
    "evaluate_split": "loop",
    "fit": "loop",
    "load_checkpoint": "checkpoint",
    "load_train_data": "data",
    "resolve_device": "context",
    "save_checkpoint": "checkpoint",
    "self_adversarial_bce": "loss",
    "train_data_from_triples": "data",
}

__all__ = [
    "Batch",
    "CheckpointError",
    "CheckpointStore",
    "FitResult",
    "LocalContext",
    "QuerySampler",
    "SplitData",
    "TrainContext",
    "TrainData",
    "evaluate_split",
    "fit",
    "load_checkpoint",
    "load_train_data",
    "resolve_device",
    "save_checkpoint",
    "self_adversarial_bce",
    "train_data_from_triples",
]


def __getattr__(name: str) -> Any:
    """``cmpnn_dist.training.<name>``: imported from its module on first use (PEP 562)."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
