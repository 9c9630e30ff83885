"""Distributed training on Ray Train (the only package that imports ``ray`` and
``torch.distributed``).

``run_distributed(cfg, dataset_path)`` is the entry point the CLI calls when
``cluster.num_workers > 0``; :class:`RayTrainContext` is the ``TrainContext`` each worker
hands to :func:`cmpnn_dist.training.loop.fit`.  Importing this package does not import Ray.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_distributed", "DistributedTrainingError"]


def __getattr__(name: str) -> Any:
    if name in ("run_distributed", "DistributedTrainingError"):
        from . import driver

        return getattr(driver, name)
    raise AttributeError(name)
