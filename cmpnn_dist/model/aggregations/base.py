"""AGG: the aggregation protocol and its registry (paper section 4.1, appendix E).

An aggregation turns the raw reductions of :func:`cmpnn_dist.ops.propagate` over the messages
M_v into node v (``sum``, ``sumsq``, ``max``, ``min`` each float [N, B, d]; ``degree`` [N],
deg(v) = |M_v|, kept edges only) into AGG_v float [N, B, width * d].  A subclass declares
``name`` (the ``model.aggregate`` value), ``reductions`` (the subset of
:data:`cmpnn_dist.ops.reductions.AGGREGATORS` it reads), ``width`` and ``formula``, implements
``forward(raw)``, and is added with :func:`register`; the layer's W_0 maps
[h^{f(t)} || AGG_v] (d + width d) back to d.  ``combine`` may be overridden to compute
W_0 [h || AGG] without building AGG (PNA does).  One that reads a statistic of the whole
graph's degrees sets ``graph_degrees`` and reads it from ``raw["log_degree_mean"]`` when
present: on a packed subgraph (pruned propagation) the layer puts the full graph's there.

A new aggregation is one new file in this package (every module here is imported by the
package, see ``__init__.py``): ``docs/extending.md`` has a worked example.  One that needs a
reduction ``propagate`` does not compute also needs that reduction in every ops impl.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from cmpnn_dist.config import Aggregate, choices, register_choice
from cmpnn_dist.ops import ordered
from cmpnn_dist.ops.reductions import AGGREGATORS


class Aggregation(nn.Module):
    """Parameter-free AGG built from the raw reductions of ``propagate``."""

    name: ClassVar[str]
    reductions: ClassVar[tuple[str, ...]]
    width: ClassVar[int] = 1
    formula: ClassVar[str] = ""
    graph_degrees: ClassVar[bool] = False  # reads raw["log_degree_mean"] (the module doc)

    @property
    def kind(self) -> str:
        """The ``model.aggregate`` value (``name``)."""
        return self.name

    @property
    def ops_aggregators(self) -> tuple[str, ...]:
        """The raw reductions this aggregation needs from ``propagate``."""
        return self.reductions

    def out_dim(self, dim: int) -> int:
        """Width of AGG_v for hidden size ``dim``: ``width * dim``."""
        return self.width * dim

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
        """Args: raw: ``propagate`` output (each [N, B, d]; ``degree`` [N]).
        Returns: AGG float [N, B, width * d]."""
        raise NotImplementedError

    def combine(self, linear: nn.Linear, h_hist: Tensor, raw: dict[str, Tensor]) -> Tensor:
        """W_0 [h^{f(t)} || AGG] + bias, float [N, B, d] (``linear``: d + width d -> d)."""
        return ordered.linear(torch.cat([h_hist, self(raw)], dim=-1), linear.weight, linear.bias)


_REGISTRY: dict[str, type[Aggregation]] = {}
_BUILTIN: tuple[str, ...] = choices(Aggregate)  # the config's Literal, in its order


def register(cls: type[Aggregation]) -> type[Aggregation]:
    """Class decorator: make ``cls`` selectable as ``model.aggregate: <cls.name>``."""
    unknown = [r for r in cls.reductions if r not in AGGREGATORS]
    if unknown:
        raise ValueError(
            f"aggregation {cls.name!r} needs reductions {unknown} that ops.propagate does not "
            f"compute (it computes {list(AGGREGATORS)})"
        )
    _REGISTRY[cls.name] = cls
    register_choice("model.aggregate", cls.name)
    return cls


def names() -> list[str]:
    """The registered ``model.aggregate`` values: the config's ``Aggregate`` ones in its
    order, then the others in registration order."""
    builtin = [n for n in _BUILTIN if n in _REGISTRY]
    return builtin + [n for n in _REGISTRY if n not in builtin]


def resolve(name: str) -> type[Aggregation]:
    """The aggregation class of ``name``; ValueError naming the choices when unknown."""
    if name not in _REGISTRY:
        raise ValueError(f"model.aggregate={name!r} is not one of {names()}")
    return _REGISTRY[name]


def build(name: str) -> Aggregation:
    """An instance of the aggregation ``name``."""
    return resolve(name)()
