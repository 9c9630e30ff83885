"""Single-process training core: data, sampler, loss, checkpoints, contexts and ``fit``.

See docs/design.md; the Ray workers run :func:`fit` with their own ``TrainContext``.
"""

from .checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from .checkpoint_store import CheckpointStore
from .context import LocalContext, TrainContext, resolve_device
from .data import SplitData, TrainData, load_train_data, train_data_from_triples
from .loop import FitResult, evaluate_split, fit
from .loss import self_adversarial_bce
from .sampler import Batch, QuerySampler

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
