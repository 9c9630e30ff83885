"""The registry of evaluation protocols (``eval.protocol``).

    all     filtered ranking over every entity                    (filtered.py)
    typed   filtered ranking over the target's node type          (filtered.py)
    ogb     OGB's official negatives and Evaluator                (ogb.py)

Every module of this package is imported here, so a new protocol is one new file with an
``@register``-ed :class:`EvalProtocol` subclass (see :mod:`.base` and ``docs/extending.md``).
"""

from __future__ import annotations

import importlib
import pkgutil

from cmpnn_dist.evaluation.protocols.base import Batch, EvalProtocol, names, register, resolve

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Batch", "EvalProtocol", "names", "register", "resolve"]
