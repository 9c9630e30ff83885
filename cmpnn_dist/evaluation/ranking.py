"""Link-prediction evaluation, both directions, three protocols, grouped and sharded.

Every query fact (h, r, t) is ranked twice: tail prediction (h, r) -> t and head prediction
as tail prediction with the inverse relation (t, r + |R|) -> h.  Protocols (``eval.protocol``,
a registry: :mod:`cmpnn_dist.evaluation.protocols`, one file each):

* ``all``: filtered ranking over every entity: candidates that form another true fact (any
  fact in ``filter_triples``, same direction) are removed;
* ``typed``: as ``all``, restricted to the entities of the target's node type (the paper's
  biomedical protocol);
* ``ogb``: the target against OGB's official negatives of its fact (``tail_neg`` [F, K] for
  tail prediction, ``head_neg`` for head prediction), unfiltered; MRR and Hits@1/3/10 come
  from ``ogb.linkproppred.Evaluator("ogbl-biokg")`` (:mod:`cmpnn_dist.evaluation.ogb_eval`).

Grouping: the 2F rankings are grouped by their (node, relation) query; one model forward pass
row scores all N entities of a group and ranks every target of that group (each one's other
true answers are filtered).  Groups are sorted by key and cut into batches of
``batch_size`` groups; with ``world_size`` workers, batch j is scored by worker
``j % world_size`` (each batch is the same forward pass as in a one-process run, so the ranks
are identical), and ``gather`` concatenates the workers' rows.
Ties: ``pessimistic`` or ``average`` (:func:`cmpnn_dist.evaluation.metrics.tied_rank`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from cmpnn_dist.config import Protocol, choices
from cmpnn_dist.evaluation import protocols
from cmpnn_dist.evaluation.answers import AnswerIndex
from cmpnn_dist.evaluation.metrics import TIES, tied_rank
from cmpnn_dist.evaluation.protocols import Batch, EvalProtocol
from cmpnn_dist.evaluation.rank_table import RankTable
from cmpnn_dist.graph import Graph

PROTOCOLS: tuple[str, ...] = choices(Protocol)  # the built-in ones (config's Literal)
__all__ = ["PROTOCOLS", "AnswerIndex", "evaluate", "metrics_of", "rank_queries", "rank_split"]


def _check(protocol: str, ties: str, node_types: Tensor | None, negatives: Any) -> EvalProtocol:
    proto = protocols.resolve(protocol)  # ValueError naming eval.protocol and the choices
    if ties not in TIES:
        raise ValueError(f"eval.ties={ties!r}: choose one of {list(TIES)}")
    proto.check(node_types, negatives)
    return proto


def rank_split(
    model: nn.Module,
    graph: Graph,
    queries: Tensor,
    filter_triples: Tensor,
    *,
    num_relations: int,
    protocol: str = "all",
    ties: str = "pessimistic",
    node_types: Tensor | None = None,
    negatives: dict[str, Tensor] | None = None,
    batch_size: int = 16,
    device: torch.device | str | None = None,
    progress: bool = False,
    rank: int = 0,
    world_size: int = 1,
    gather: Callable[[Tensor], Tensor] | None = None,
) -> RankTable:
    """Rank both directions of ``queries`` [F, 3]; see the module docstring.

    Args:
        model: ``model(graph, heads [B], rels [B]) -> scores [B, N]``; called in eval mode under
            ``torch.no_grad`` (its training flag is restored).
        graph: the message graph.  queries: int64 [F, 3], r < |R|.
        filter_triples: int64 [G, 3] every known fact (``all`` / ``typed`` filter).
        node_types: int64 [N] (``typed``).  negatives: ``{"head_neg", "tail_neg"}`` int64
            [F, K] aligned with ``queries`` (``ogb``).
        batch_size: (node, relation) groups per forward pass.
        rank, world_size, gather: this worker's index, the number of workers, and a function
            concatenating a float64 [n, c] tensor over workers in rank order (needed when
            ``world_size > 1``).

    Returns:
        :class:`RankTable` of the 2F rankings (rows 0..F-1 tail prediction, F..2F-1 head
        prediction), identical on every worker.
    """
    proto = _check(protocol, ties, node_types, negatives)
    if world_size > 1 and gather is None:
        raise ValueError("rank_split with world_size > 1 needs a gather function")
    if device is None:
        param = next(iter(model.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
    device = torch.device(device)
    queries = queries.long().reshape(-1, 3).cpu()
    F = queries.shape[0]
    heads = torch.cat([queries[:, 0], queries[:, 2]])
    rels = torch.cat([queries[:, 1], queries[:, 1] + num_relations])
    targets = torch.cat([queries[:, 2], queries[:, 0]])
    keys = heads * (2 * num_relations) + rels
    group_keys, group_of = torch.unique(keys, return_inverse=True)
    order = torch.argsort(group_of, stable=True)  # queries sorted by group
    group_ptr = torch.zeros(len(group_keys) + 1, dtype=torch.long)
    group_ptr[1:] = torch.bincount(group_of, minlength=len(group_keys)).cumsum(0)
    g_heads, g_rels = group_keys // (2 * num_relations), group_keys % (2 * num_relations)
    num_batches = (len(group_keys) + batch_size - 1) // batch_size
    mine = list(range(rank, num_batches, world_size))
    graph = graph.to(device) if graph.device != device else graph
    state = proto.setup(filter_triples, num_relations, node_types, device)
    my_queries = sum(
        int(group_ptr[min((j + 1) * batch_size, len(group_keys))] - group_ptr[j * batch_size])
        for j in mine
    )
    bar = _bar(progress, my_queries)
    rows: list[Tensor] = []
    was_training = model.training
    model.eval()
    started = time.perf_counter()
    try:
        with torch.no_grad():
            for j in mine:
                g0, g1 = j * batch_size, min((j + 1) * batch_size, len(group_keys))
                scores = model(graph, g_heads[g0:g1].to(device), g_rels[g0:g1].to(device))
                scores = scores.float()
                q = order[group_ptr[g0] : group_ptr[g1]]
                row = (group_of[q] - g0).to(device)
                batch = Batch(
                    scores, row, targets[q].to(device), q, g_heads[g0:g1], g_rels[g0:g1], F,
                    negatives,
                )  # fmt: skip
                out = proto.rank(state, batch)
                rows.append(torch.cat([q.double().unsqueeze(1), out.double().cpu()], 1))
                bar.update(len(q))
    finally:
        model.train(was_training)
        bar.close()
    width = 5 + len(proto.extra_columns)
    local = torch.cat(rows) if rows else torch.zeros(0, width, dtype=torch.float64)
    table = gather(local) if world_size > 1 and gather is not None else local
    table = table[torch.argsort(table[:, 0])]
    if table.shape[0] != 2 * F or not torch.equal(table[:, 0].long(), torch.arange(2 * F)):
        raise RuntimeError(f"evaluation gathered {table.shape[0]} rankings, expected {2 * F}")
    greater, equal, num = table[:, 1].long(), table[:, 2].long(), table[:, 3].long()
    used_ties = proto.fixed_ties or ties
    result = RankTable(
        heads=torch.cat([queries[:, 0], queries[:, 0]]),
        relations=torch.cat([queries[:, 1], queries[:, 1]]),
        tails=torch.cat([queries[:, 2], queries[:, 2]]),
        head_direction=torch.arange(2 * F) >= F,
        rank=tied_rank(greater, equal, used_ties),
        candidates=num,
        protocol=protocol,
        ties=used_ties,
        seconds=time.perf_counter() - started,
    )
    result.ogb_lists = {k: table[:, 5 + i].float() for i, k in enumerate(proto.extra_columns)}
    return result


def _bar(enabled: bool, total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        disable=not enabled,
        desc="evaluate",
        unit="query",
        dynamic_ncols=True,
        leave=False,
    )


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
    **kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """Filtered ranks of the queries, tail direction then head direction.

    Returns: ``(ranks [2F], num_candidates int64 [2F])``; rows ``0..F-1`` are tail
    predictions of ``queries``, rows ``F..2F-1`` their head predictions (ranks int64 with
    pessimistic ties, float64 with ``ties="average"``).  ``kwargs`` go to :func:`rank_split`.
    """
    t = rank_split(
        model,
        graph,
        queries,
        filter_triples,
        num_relations=num_relations,
        batch_size=batch_size,
        device=device,
        progress=progress,
        **kwargs,
    )
    return t.rank, t.candidates


def metrics_of(
    table: RankTable, num_negatives_hits: int = 50, hits_negatives_rule: str = "paper"
) -> dict[str, Any]:
    """Mean metrics of a :class:`RankTable` plus ``num_queries``, ``protocol``, ``ties`` and
    (not for ``ogb``) ``hits_negatives_rule``.

    ``ogb``: MRR and Hits@1/3/10 are the means of ogb's Evaluator lists (``mr`` from our
    ranks, which equal the Evaluator's); ``all`` / ``typed``: :func:`ranking_metrics`."""
    if table.rank.numel() == 0:
        raise ValueError("evaluate: no queries to rank")
    out = protocols.resolve(table.protocol).metrics(table, num_negatives_hits, hits_negatives_rule)
    out["num_queries"] = int(table.rank.numel())
    out["protocol"] = table.protocol
    out["ties"] = "average" if table.protocol == "ogb" else table.ties  # ogb's Evaluator averages
    return out


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
    hits_negatives_rule: str = "paper",
    ranks_path: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Ranking metrics of ``queries`` [F, 3] on ``graph``, both directions.

    Args:
        max_queries: use only the first ``max_queries`` facts (None: all).
        num_negatives_hits, hits_negatives_rule: n and the sampling rule of ``hits@10_50``
            (:func:`~cmpnn_dist.evaluation.metrics.hits_at_k_with_negatives`).
        ranks_path: write the per-query :class:`RankTable` there as Parquet (None: don't).
        kwargs: ``protocol``, ``ties``, ``node_types``, ``negatives``, ``rank``,
            ``world_size``, ``gather`` of :func:`rank_split`.

    Returns: ``{"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50" (not for ``ogb``),
    "num_queries", "protocol", "ties", "hits_negatives_rule" (not for ``ogb``)}``;
    ``num_queries`` is the number of rankings (2 per fact).
    """
    queries = queries.long().reshape(-1, 3)
    negatives = kwargs.get("negatives")
    if max_queries is not None:
        queries = queries[:max_queries]
        if negatives is not None:
            kwargs["negatives"] = {k: v[:max_queries] for k, v in negatives.items()}
    if queries.shape[0] == 0:
        raise ValueError("evaluate: no queries to rank")
    table = rank_split(
        model,
        graph,
        queries,
        filter_triples,
        num_relations=num_relations,
        batch_size=batch_size,
        device=device,
        progress=progress,
        **kwargs,
    )
    if ranks_path is not None:
        table.write_parquet(ranks_path)
    return metrics_of(table, num_negatives_hits, hits_negatives_rule)
