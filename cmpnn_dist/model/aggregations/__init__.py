"""AGG: the registry of aggregations (``model.aggregate``).

    sum    sum M_v                                  (simple.py)
    mean   sum M_v / max(deg(v), 1)                 (simple.py)
    max    max M_v                                  (simple.py)
    pna    [S, S s, S / s'], S = [mean, max, min, std]   (pna.py)

Every module of this package is imported here, so a new aggregation is one new file with an
``@register``-ed :class:`Aggregation` subclass (see :mod:`.base` and ``docs/extending.md``).
"""

from __future__ import annotations

import importlib
import pkgutil

from cmpnn_dist.model.aggregations.base import Aggregation, build, names, register, resolve

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

AGGREGATE_KINDS: tuple[str, ...] = tuple(names())  # the built-in ones (config's Literal)

__all__ = ["AGGREGATE_KINDS", "Aggregation", "build", "names", "register", "resolve"]
