"""``ogb``: the target against OGB's official negatives of its fact, unfiltered.

    candidates(q, t) = tail_neg[f] (tail prediction of fact f) or head_neg[f] (head prediction)

MRR and Hits@1/3/10 are the means of ``ogb.linkproppred.Evaluator("ogbl-biokg")``'s
per-ranking lists (:mod:`cmpnn_dist.evaluation.ogb_eval`), with its average tie rule; ``mr``
comes from our ranks, which equal the Evaluator's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cmpnn_dist.evaluation.protocols.base import Batch, EvalProtocol, count_against, register
from cmpnn_dist.evaluation.rank_table import RankTable


@register
class OGB(EvalProtocol):
    name = "ogb"
    extra_columns = ("mrr", "hits@1", "hits@3", "hits@10")
    fixed_ties = "average"

    def check(self, node_types: Tensor | None, negatives: Any, num_queries: int = 1) -> None:
        if num_queries and negatives is None:
            raise ValueError(
                "eval.protocol=ogb needs OGB's official negatives, which only ogb:biokg "
                "datasets store; use eval.protocol=typed or all"
            )

    def rank(self, state: Any, batch: Batch) -> Tensor:
        from cmpnn_dist.evaluation.ogb_eval import ogb_lists

        assert batch.negatives is not None
        scores, row, target = batch.scores, batch.row, batch.target
        cand = _official(batch.negatives, batch.index, batch.num_facts).to(scores.device)
        pos = scores[row, target]
        neg = scores[row.unsqueeze(1), cand]
        counts = count_against(neg, pos.unsqueeze(1), torch.ones_like(neg, dtype=torch.bool))
        lists = ogb_lists(pos, neg)
        return torch.cat([counts.double(), torch.stack(lists, 1).double()], 1)

    def metrics(
        self, table: RankTable, num_negatives_hits: int, hits_negatives_rule: str = "paper"
    ) -> dict[str, Any]:
        out: dict[str, Any] = {"mr": float(table.rank.double().mean())}
        for k, v in table.ogb_lists.items():
            out[k] = float(v.mean())
        return out


def _official(negatives: dict[str, Tensor], q: Tensor, F: int) -> Tensor:
    """int64 [Q, K]: ``tail_neg`` rows of tail rankings (q < F), ``head_neg`` of head ones
    (read row by row: the stored arrays stay memory-mapped)."""
    q = q.cpu()
    tail = q < F
    out = torch.empty(len(q), negatives["tail_neg"].shape[1], dtype=torch.long)
    out[tail] = negatives["tail_neg"][q[tail]].long()
    out[~tail] = negatives["head_neg"][q[~tail] - F].long()
    return out
