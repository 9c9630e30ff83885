"""The one ranking of the predict API: scored candidates in, the top-k of each query out.

:meth:`Predictor.rank <cmpnn_dist.predict.Predictor.rank>` (:func:`rank_batch`) scores a
batch of queries, one forward row per distinct ``(anchor, relation)``, and ranks each query
with :func:`top_k`.  ``predict`` / ``predict_batch`` (a DataFrame: :func:`ranking_frame`),
batch scoring (``batch_scorer.py``, Arrow) and the server (``serve/engine.py``, JSON) all
build their rows from the :class:`Ranking` it returns.  For query b, with
``score[b, v] = logit(v | u_b, q_b)`` ([B, N]) and its typed candidates ``candidates[b, v]``
([B, N]: the relation's target types, and a request's own tail type):

    keep[b, v]  = candidates[b, v]  [and code[b, v] == 0 with known="filter"]
    order[b]    = stable argsort of -score[b], the v outside keep[b] at -inf
    count[b]    = min(k, |keep[b]|);  rows: order[b][:count[b]], rank 1 .. count[b]

Tie rule (the one every caller shares): equal scores keep entity-id order, at the top-k cut
too (of tied candidates straddling the cut, the smaller ids are kept).  A query with a given
answer a_b (``answers[b] >= 0``) gets the one row a_b, ranked ``1 + |{v in keep[b]:
score[b, v] > score[b, a_b]}|`` (ties in the answer's favour).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from cmpnn_dist.errors import UsageError

KNOWN_MODES = ("flag", "filter")
SPLITS = ("train", "valid", "test")
KNOWN_NAMES = np.array(["", *SPLITS], dtype=object)  # by known-fact code
COLUMNS = [
    "query_id",
    "target",
    "rank",
    "head",
    "relation",
    "tail",
    "score",
    "probability",
    "known",
    "head_id",
    "tail_id",
]


@dataclass(frozen=True)
class Ranking:
    """The ranked rows of B queries, K = min(k, N) slots each; slot i of query b is a row
    when ``i < counts[b]`` (padding after: id -1, score -inf, rank 0, code 0).

    Attributes:
        ids: int64 [B, K] entity ids, best first.
        scores: float32 [B, K] their logits.
        ranks: int64 [B, K] 1 .. counts[b] (a given answer: its rank among the candidates).
        known: int8 [B, K] 0 unknown, else 1 + index in (train, valid, test) of the first
            split that holds the fact (:meth:`Predictor.known_codes`).
        counts: int64 [B] rows of each query.
    """

    ids: Tensor
    scores: Tensor
    ranks: Tensor
    known: Tensor
    counts: Tensor

    @classmethod
    def empty(cls, b: int, width: int) -> Ranking:
        """B queries of ``width`` padding slots, to be filled with :meth:`put`."""
        return cls(
            torch.full((b, width), -1, dtype=torch.long),
            torch.full((b, width), float("-inf")),
            torch.zeros(b, width, dtype=torch.long),
            torch.zeros(b, width, dtype=torch.int8),
            torch.zeros(b, dtype=torch.long),
        )

    def put(self, rows: Tensor, part: Ranking) -> None:
        """Write ``part`` (len(rows) queries, same width) into queries ``rows`` (int64)."""
        for name in ("ids", "scores", "ranks", "known", "counts"):
            getattr(self, name)[rows] = getattr(part, name)

    def flat(self) -> tuple[Tensor, Tensor]:
        """(query index, slot) int64 [R] of every row, by query then rank."""
        width = self.ids.shape[1]
        valid = torch.arange(width)[None, :] < self.counts[:, None]
        qi, pos = torch.nonzero(valid, as_tuple=True)
        return qi, pos


def top_k(
    scores: Tensor,
    keep: Tensor,
    codes: Tensor,
    k: int,
    known: str = "flag",
    answers: Tensor | None = None,
) -> Ranking:
    """Rank M queries whose every entity is scored (the formula of the module docstring).

    Args:
        scores: float32 [M, N] logits (CPU).
        keep: bool [M, N] the typed candidates of each query.
        codes: int8 [M, N] known-fact codes (:meth:`Predictor.known_codes`).
        k: rows per query, at most; K = min(k, N) slots.
        known: ``flag`` (codes reported) or ``filter`` (known facts dropped too).
        answers: int64 [M]: -1 ranks the top-k, v >= 0 gives the one row v and its rank.
    """
    m, n = scores.shape
    if known == "filter":
        keep = keep & (codes == 0)
    masked = torch.where(keep, scores, torch.full_like(scores, float("-inf")))
    width = min(int(k), n)
    # a stable descending order: equal scores keep entity-id order
    order = np.argsort(-masked.numpy(), axis=1, kind="stable")[:, :width]
    ids = torch.from_numpy(np.ascontiguousarray(order)).long()
    ranks = torch.arange(1, width + 1).repeat(m, 1)
    counts = keep.sum(dim=1).clamp(max=width)
    if answers is not None and bool((answers >= 0).any()):
        fact = answers >= 0
        given = answers[fact]
        s = scores[fact].gather(1, given[:, None])  # [F, 1]: the answer's own score
        ids[fact, 0] = given
        ranks[fact, 0] = 1 + (masked[fact] > s).sum(dim=1)
        counts[fact] = 1
    valid = torch.arange(width)[None, :] < counts[:, None]
    ids = torch.where(valid, ids, torch.full_like(ids, -1))
    at = ids.clamp(min=0)
    return Ranking(
        ids=ids,
        scores=torch.where(valid, scores.gather(1, at), torch.tensor(float("-inf"))),
        ranks=torch.where(valid, ranks, torch.zeros_like(ranks)),
        known=torch.where(valid, codes.gather(1, at), torch.zeros((), dtype=codes.dtype)),
        counts=counts,
    )


def row_sigmoid(scores: Tensor, counts: Tensor) -> Tensor:
    """``sigmoid(scores)`` (float64 [R], the rows of consecutive queries, ``counts`` [B] of
    each) taken one query at a time: torch's result for an element depends on its place in
    the vector it is computed in, so each query gets the probabilities it gets alone."""
    parts = torch.split(scores, counts.tolist())
    return torch.cat([torch.sigmoid(x) for x in parts]) if parts else scores.clone()


def rank_batch(
    p: Any,
    anchors: Tensor,
    rels: Tensor,
    k: int,
    candidates: Tensor | None = None,
    known: str = "flag",
    answers: Tensor | None = None,
) -> Ranking:
    """:meth:`Predictor.rank` (its docstring gives the arguments) for the predictor ``p``:
    distinct ``(anchor, relation)`` pairs scored ``p.batch_size`` at a time, each query
    ranked by :func:`top_k` from its pair's row."""
    if known not in KNOWN_MODES:
        raise UsageError(f"known={known!r}: choose one of {list(KNOWN_MODES)}")
    if k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    b, n = anchors.numel(), p.graph.num_nodes
    if candidates is not None and tuple(candidates.shape) != (b, n):
        raise UsageError(f"candidates must be bool [{b}, {n}], got {tuple(candidates.shape)}")
    keys: dict[tuple[int, int], int] = {}
    pairs = zip(anchors.tolist(), rels.tolist(), strict=True)
    slot = torch.tensor([keys.setdefault(q, len(keys)) for q in pairs], dtype=torch.long)
    key_ids = torch.tensor(list(keys), dtype=torch.long).reshape(-1, 2)
    out = Ranking.empty(b, min(int(k), n))
    for s in range(0, len(keys), p.batch_size):
        ka, kr = key_ids[s : s + p.batch_size].unbind(1)
        members = torch.nonzero((slot >= s) & (slot < s + ka.numel())).flatten()
        j = slot[members] - s  # each member query's row in this chunk
        keep = p.candidate_mask(ka, kr)[j] if candidates is None else candidates[members].bool()
        given = None if answers is None else answers[members]
        scores, codes = p.scores(ka, kr)[j], p.known_codes(ka, kr)[j]
        out.put(members, top_k(scores, keep, codes, k, known, given))
    return out


def ranking_frame(
    ranked: Ranking,
    anchors: Tensor,
    rels: Tensor,
    entity_names: Sequence[str],
    relation_names: Sequence[str],
) -> pd.DataFrame:
    """The rows of ``ranked`` as ``predict_batch``'s DataFrame (:data:`COLUMNS`): by query,
    then rank; a query with ``rels[b] >= |R|`` (inverse) predicts heads."""
    num_relations = len(relation_names)
    qi, pos = ranked.flat()
    if qi.numel() == 0:
        return pd.DataFrame([], columns=COLUMNS)  # no row: untyped (object) columns
    v, anchor, rel = ranked.ids[qi, pos].numpy(), anchors[qi].numpy(), rels[qi].numpy()
    inverse = rel >= num_relations
    head, tail = np.where(inverse, v, anchor), np.where(inverse, anchor, v)
    names = np.array(entity_names, dtype=object)
    score = ranked.scores[qi, pos].double()
    columns = {
        "query_id": qi.numpy(),
        "target": np.where(inverse, "head", "tail").astype(object),
        "rank": ranked.ranks[qi, pos].numpy(),
        "head": names[head],
        "relation": np.array(relation_names, dtype=object)[rel % num_relations],
        "tail": names[tail],
        "score": score.numpy(),
        "probability": row_sigmoid(score, ranked.counts).numpy(),
        "known": KNOWN_NAMES[ranked.known[qi, pos].long().numpy()],
        "head_id": head,
        "tail_id": tail,
    }
    return pd.DataFrame(columns, columns=COLUMNS)
