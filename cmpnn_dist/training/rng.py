"""Seeding, capturing and restoring every global RNG (python, numpy, torch CPU and CUDA).

States are stored as plain Python containers and tensors so checkpoints load with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed ``random``, ``numpy.random`` and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng_state() -> dict[str, Any]:
    """Every global RNG state: ``{"python", "numpy", "torch", "cuda"}`` (cuda None without GPU)."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    cuda = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.cuda.get_rng_state_all()
    return {
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
        "cuda": cuda,
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Run a block (e.g. evaluation) without changing any global RNG state afterwards."""
    state = capture_rng_state()
    try:
        yield
    finally:
        restore_rng_state(state)
