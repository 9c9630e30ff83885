"""Single-process training core: data, sampler, loss, contexts and ``fit``.

See docs/design.md; the Ray workers run :func:`fit` with their own ``TrainContext``.  The run
folder and its checkpoints are :mod:`cmpnn_dist.runs` (below this layer: prediction and
serving read checkpoints without importing it).  Importing this package loads none of its
modules: the names below load theirs on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_MODULE_OF = {
    "Batch": "sampler",
    "FitResult": "loop",
    "LocalContext": "context",
    "QuerySampler": "sampler",
    "SplitData": "data",
    "TrainContext": "context",
    "TrainData": "data",
    "evaluate_split": "loop",
    "fit": "loop",
    "load_train_data": "data",
    "resolve_device": "context",
    "self_adversarial_bce": "loss",
    "train_data_from_triples": "data",
}

__all__ = [
    "Batch",
    "FitResult",
    "LocalContext",
    "QuerySampler",
    "SplitData",
    "TrainContext",
    "TrainData",
    "evaluate_split",
    "fit",
    "load_train_data",
    "resolve_device",
    "self_adversarial_bce",
    "train_data_from_triples",
]


def __getattr__(name: str) -> Any:
    """``cmpnn_dist.training.<name>``: imported from its module on first use (PEP 562)."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
