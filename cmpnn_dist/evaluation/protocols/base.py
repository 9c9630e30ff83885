"""The evaluation-protocol interface (``eval.protocol``) and its registry.

A protocol decides what each ranking's target is compared against and which metrics it
reports.  :func:`cmpnn_dist.evaluation.ranking.rank_split` groups the 2F rankings by
(node, relation), scores every entity of a group with one forward pass, and hands each batch to
the protocol:

    state = protocol.setup(filter_triples [G, 3], num_relations, node_types [N] | None, device)
    cols  = protocol.rank(state, batch)   # float/int [Q, 4 + len(extra_columns)]:
            (greater, equal, candidates, 0, *extra_columns) per ranking of the batch

``greater`` / ``equal`` count the candidates scoring above / equal to the target (the rank
follows from the tie rule, :func:`cmpnn_dist.evaluation.metrics.tied_rank`); ``extra_columns``
are per-ranking floats kept on the :class:`~cmpnn_dist.evaluation.rank_table.RankTable`
(``ogb``: its Evaluator's lists).  ``metrics(table, num_negatives_hits)`` turns the gathered
table into the reported numbers (default: :func:`~cmpnn_dist.evaluation.metrics.ranking_metrics`).
``fixed_ties`` forces a tie rule (``ogb``: average, as its Evaluator).  ``check`` raises
ValueError naming ``eval.protocol`` when the data cannot serve the protocol.

A new protocol is one new file in this package with an ``@register``-ed subclass (every module
here is imported by the package; ``docs/extending.md`` has a worked example).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from cmpnn_dist.config import Protocol, choices, register_choice
from cmpnn_dist.evaluation.metrics import ranking_metrics
from cmpnn_dist.evaluation.rank_table import RankTable


@dataclass
class Batch:
    """One forward pass's rankings, as the protocol sees them.

    ``scores`` float [b, N] (one row per (node, relation) group); ``row`` int64 [Q] the score
    row of each ranking; ``target`` int64 [Q] its true answer; ``index`` int64 [Q] its position
    among the 2F rankings (``< F``: tail prediction of fact ``index``, else head prediction of
    fact ``index - F``); ``heads`` / ``rels`` int64 [b] the groups' queries (CPU);
    ``num_facts`` F; ``negatives`` the split's ``{"head_neg", "tail_neg"}`` [F, K] or None."""

    scores: Tensor
    row: Tensor
    target: Tensor
    index: Tensor
    heads: Tensor
    rels: Tensor
    num_facts: int
    negatives: dict[str, Tensor] | None


class EvalProtocol:
    """One ``eval.protocol``; see the module docstring."""

    name: ClassVar[str]
    extra_columns: ClassVar[tuple[str, ...]] = ()
    fixed_ties: ClassVar[str | None] = None

    def check(self, node_types: Tensor | None, negatives: Any, num_queries: int = 1) -> None:
        """Raise ValueError naming ``eval.protocol`` when the data cannot serve it."""

    def setup(
        self, filter_triples: Tensor, num_relations: int, node_types: Tensor | None, device: Any
    ) -> Any:
        """Per-split state shared by every batch (e.g. the answer index)."""
        return None

    def rank(self, state: Any, batch: Batch) -> Tensor:
        """[Q, 4 + len(extra_columns)] (greater, equal, candidates, 0, *extras)."""
        raise NotImplementedError

    def metrics(
        self, table: RankTable, num_negatives_hits: int, hits_negatives_rule: str = "paper"
    ) -> dict[str, Any]:
        """The reported metrics of the gathered rankings (``hits_negatives_rule``: what the
        ``num_negatives_hits`` samples of ``hits@10_50`` are, see
        :func:`~cmpnn_dist.evaluation.metrics.hits_at_k_with_negatives`)."""
        out = ranking_metrics(table.rank, table.candidates, num_negatives_hits, hits_negatives_rule)
        out["hits_negatives_rule"] = hits_negatives_rule
        return out


def count_against(scores: Tensor, target_score: Tensor, candidates: Tensor) -> Tensor:
    """[Q, 4] (greater, equal, #candidates, 0): ``scores`` [Q, K] of the candidates (``candidates``
    bool [Q, K] marks the ones that count), ``target_score`` [Q, 1]."""
    greater = ((scores > target_score) & candidates).sum(1)
    equal = ((scores == target_score) & candidates).sum(1)
    return torch.stack([greater, equal, candidates.sum(1), torch.zeros_like(greater)], 1)


_REGISTRY: dict[str, type[EvalProtocol]] = {}
_BUILTIN: tuple[str, ...] = choices(Protocol)  # the config's Literal, in its order


def register(cls: type[EvalProtocol]) -> type[EvalProtocol]:
    """Class decorator: make ``cls`` selectable as ``eval.protocol: <cls.name>``."""
    _REGISTRY[cls.name] = cls
    register_choice("eval.protocol", cls.name)
    return cls


def names() -> list[str]:
    """The registered protocols: the config's ``Protocol`` ones in its order, then others."""
    builtin = [n for n in _BUILTIN if n in _REGISTRY]
    return builtin + [n for n in _REGISTRY if n not in builtin]


def resolve(name: str) -> EvalProtocol:
    """An instance of protocol ``name``; ValueError naming the choices when unknown."""
    if name not in _REGISTRY:
        raise ValueError(f"eval.protocol={name!r}: choose one of {names()}")
    return _REGISTRY[name]()
