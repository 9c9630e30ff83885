"""``all`` and ``typed``: filtered ranking over every entity (of the target's type).

    all:    candidates(q, t) = { v in V : (u, r, v) not a known fact } u {t}
    typed:  candidates(q, t) = { v in V : type(v) = type(t), (u, r, v) not a known fact } u {t}

Known facts are ``filter_triples`` in the ranking's direction (:class:`AnswerIndex`); the rank
of t counts the candidates scoring above (and, by the tie rule, equal to) it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cmpnn_dist.evaluation.answers import AnswerIndex
from cmpnn_dist.evaluation.protocols.base import Batch, EvalProtocol, count_against, register

_RANK_ELEMENTS = 1 << 24  # (queries x N) entries compared at once


@register
class All(EvalProtocol):
    name = "all"

    def setup(
        self, filter_triples: Tensor, num_relations: int, node_types: Tensor | None, device: Any
    ) -> Any:
        return AnswerIndex(filter_triples, num_relations), self._types(node_types, device)

    def _types(self, node_types: Tensor | None, device: Any) -> Tensor | None:
        return None

    def rank(self, state: Any, batch: Batch) -> Tensor:
        index, types = state
        scores = batch.scores
        filt = index.mask(batch.heads, batch.rels, scores.shape[1]).to(scores.device)
        step = max(1, _RANK_ELEMENTS // max(scores.shape[1], 1))
        out = []
        for s in range(0, len(batch.row), step):
            r, t = batch.row[s : s + step], batch.target[s : s + step]
            sc = scores[r]
            ar = torch.arange(len(r), device=sc.device)
            neg = ~filt[r]
            neg[ar, t] = False
            if types is not None:
                neg &= types.unsqueeze(0) == types[t].unsqueeze(1)
            out.append(count_against(sc, sc[ar, t].unsqueeze(1), neg))
        return torch.cat(out)


@register
class Typed(All):
    name = "typed"

    def check(self, node_types: Tensor | None, negatives: Any, num_queries: int = 1) -> None:
        if node_types is None:
            raise ValueError(
                "eval.protocol=typed needs node types, and this dataset has none "
                "(set data.node_types for TSV sources, or use eval.protocol=all)"
            )

    def _types(self, node_types: Tensor | None, device: Any) -> Tensor | None:
        assert node_types is not None
        return node_types.long().to(device)
