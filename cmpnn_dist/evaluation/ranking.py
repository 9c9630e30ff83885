"""Filtered link-prediction evaluation over all entities, both directions.

Every query fact (h, r, t) is ranked twice: tail prediction (h, r) -> t and head prediction
as tail prediction with the inverse relation (t, r + |R|) -> h.  The scores of all N
entities come from one model forward pass per batch of queries; candidates that form another
true fact (any fact in ``filter_triples``, in the same direction) are filtered; ties are
pessimistic (see :mod:`cmpnn_dist.evaluation.metrics`).  Metrics are averaged over the 2F
rankings.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.evaluation.metrics import filtered_rank, ranking_metrics
from cmpnn_dist.graph import Graph


class AnswerIndex:
    """All true answers of each (node, relation) key, as a sorted CSR; built in O(G log G).

    Args:
        triples: int64 [G, 3] facts (h, r, t) with r < |R|; both directions are indexed
            ((h, r) -> t and (t, r + |R|) -> h).
        num_relations: |R|.
    """

    def __init__(self, triples: Tensor, num_relations: int):
        triples = triples.long().reshape(-1, 3).cpu()
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        self.r2 = 2 * num_relations
        keys = torch.cat([h * self.r2 + r, t * self.r2 + r + num_relations])
        answers = torch.cat([t, h])
        order = torch.argsort(keys, stable=True)
        self.keys, self.answers = keys[order], answers[order]

    def mask(self, heads: Tensor, rels: Tensor, num_nodes: int) -> Tensor:
        """bool [B, N]: True where (heads[b], rels[b], v) is a known fact."""
        q = heads.cpu().long() * self.r2 + rels.cpu().long()
        lo = torch.searchsorted(self.keys, q, right=False)
        hi = torch.searchsorted(self.keys, q, right=True)
        counts = hi - lo
        out = torch.zeros(q.numel(), num_nodes, dtype=torch.bool)
        total = int(counts.sum())
        if total:
            rows = torch.repeat_interleave(torch.arange(q.numel()), counts)
            starts = torch.repeat_interleave(lo, counts)
            offsets = torch.arange(total) - torch.repeat_interleave(
                counts.cumsum(0) - counts, counts
            )
            out[rows, self.answers[starts + offsets]] = True
        return out


def rank_queries(
    model: nn.Module,
    graph: Graph,
    queries: Tensor,
    filter_triples: Tensor,
    *,
    num_relations: int,
    batch_size: int = 16,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> tuple[Tensor, Tensor]:
    """Filtered ranks of the queries, tail direction then head direction.

    Returns: ``(ranks int64 [2F], num_candidates int64 [2F])``; rows ``0..F-1`` are tail
    predictions of ``queries``, rows ``F..2F-1`` their head predictions.
    """
    if device is None:
        param = next(iter(model.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
    queries = queries.long().reshape(-1, 3).cpu()
    index = AnswerIndex(filter_triples, num_relations)
    heads = torch.cat([queries[:, 0], queries[:, 2]])
    rels = torch.cat([queries[:, 1], queries[:, 1] + num_relations])
    targets = torch.cat([queries[:, 2], queries[:, 0]])
    graph = graph.to(device) if graph.device != torch.device(device) else graph
    ranks, cands = [], []
    starts = range(0, heads.numel(), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="evaluate", unit="batch", leave=False)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for s in starts:
                h, r, t = (
                    heads[s : s + batch_size],
                    rels[s : s + batch_size],
                    targets[s : s + batch_size],
                )
                scores = model(graph, h.to(device), r.to(device)).float().cpu()
                rank, num = filtered_rank(scores, t, index.mask(h, r, graph.num_nodes))
                ranks.append(rank)
                cands.append(num)
    finally:
        model.train(was_training)
    return torch.cat(ranks), torch.cat(cands)


def evaluate(
    model: nn.Module,
    graph: Graph,
    queries: Tensor,
    filter_triples: Tensor,
    *,
    num_relations: int,
    batch_size: int = 16,
    device: torch.device | str | None = None,
    progress: bool = False,
    max_queries: int | None = None,
    num_negatives_hits: int = 50,
) -> dict[str, float]:
    """Filtered ranking metrics of ``queries`` [F, 3] on ``graph``, both directions.

    Args:
        model: called as ``model(graph, heads [B], rels [B]) -> scores [B, N]``; run in eval
            mode under ``torch.no_grad`` (its training flag is restored afterwards).
        graph: the message graph the queries are answered on.
        queries: int64 [F, 3] facts (h, r, t), r < |R|.
        filter_triples: int64 [G, 3] every known true fact (train + valid + test of this graph).
        num_relations: |R|.
        batch_size: queries per forward pass.
        device: where the model runs (default: the device of its parameters).
        progress: show a tqdm progress bar.
        max_queries: use only the first ``max_queries`` facts (None: all).

    Returns: ``{"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50", "num_queries"}``;
    ``num_queries`` is the number of rankings (2 per fact).
    """
    queries = queries.long().reshape(-1, 3)
    if max_queries is not None:
        queries = queries[:max_queries]
    if queries.shape[0] == 0:
        raise ValueError("evaluate: no queries to rank")
    ranks, cands = rank_queries(
        model,
        graph,
        queries,
        filter_triples,
        num_relations=num_relations,
        batch_size=batch_size,
        device=device,
        progress=progress,
    )
    out: dict[str, float] = ranking_metrics(ranks, cands, num_negatives_hits)
    out["num_queries"] = int(ranks.numel())
    return out
