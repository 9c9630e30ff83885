"""Lazy package exports (PEP 562): a package names what it offers without importing it.

``python -m cmpnn_dist.predict`` imports ``cmpnn_dist.predict`` before its ``__main__`` reaches
the CLI, which sets the OpenMP and malloc defaults that must precede ``import torch``
(:mod:`cmpnn_dist.openmp_env`).  A package whose exports need torch therefore defers them::

    __getattr__, __dir__ = exports(__name__, {"Predictor": "cmpnn_dist.predict.predictor"})

and ``from cmpnn_dist.predict import Predictor`` imports the module on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(
    package: str, where: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``where`` is looked up in its
    module, imported when first asked for."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
