"""The scorer of one batch-scoring worker: head ids in, the top-k rows of each as Arrow.

Every query of a job is ``(u, q, ?)`` for one relation q.  A part's heads are scored
``batch_size`` at a time by the model's batched forward (:meth:`Predictor.scores`: one
forward pass gives ``logit(v | u_b, q)`` for every entity v of every query b, ``[B, N]``);
the candidates, the known-fact codes and the stable top-k order are those of
:meth:`Predictor.predict` (``predictor.py``), computed for the whole batch at once:

    keep[b, v]  = v has a type of q's tails (all v when untyped)  [and (u_b, q, v) unknown,
                  known="filter"]
    order[b]    = stable argsort of -score[b, keep[b]]  (equal scores keep entity-id order)
    rank        = 1 .. min(k, |keep[b]|)

so each row equals the one-query API's row for that query (scores up to the float noise of a
different batch size).  ``make_scorer`` is what each Ray worker calls once: the model from
the checkpoint's state (its own configuration, so a pruned model scores with its own node
and edge budget), on the dataset the driver resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from cmpnn_dist.predict.predictor import SPLITS, Predictor

SCHEMA = pa.schema(
    [
        ("head", pa.string()),
        ("relation", pa.string()),
        ("tail", pa.string()),
        ("score", pa.float64()),
        ("probability", pa.float64()),
        ("rank", pa.int32()),
        ("known", pa.string()),
        ("head_id", pa.int64()),
        ("tail_id", pa.int64()),
    ]
)
KNOWN_NAMES = np.array(["", *SPLITS], dtype=object)


@dataclass
class ScorerSetup:
    """What every worker needs, sent once through Ray's object store."""

    cfg: Any  # the run's Config with the job's overrides
    state: dict[str, Any]  # the checkpoint's state, read once by the driver
    weights: str  # best | last
    dataset: str  # local path of the dataset folder
    graph: str  # train | test
    relation: int  # relation id in [0, |R|)
    top_k: int  # 0: every candidate
    known: str  # flag | filter
    batch_size: int  # queries per forward pass


class BatchScorer:
    """``scorer(head_ids) -> pa.Table`` with :data:`SCHEMA`, rows by query then rank."""

    def __init__(self, predictor: Predictor, relation: int, top_k: int, known: str) -> None:
        self.p = predictor
        self.relation = int(relation)
        self.top_k = int(top_k)
        self.known = known
        self.names = np.array(predictor.entities.names, dtype=object)
        self.relation_name = predictor.relations.names[self.relation]
        one = torch.tensor([self.relation])
        # the relation's candidates (the same for every head): entity ids, ascending
        self.candidates = torch.nonzero(predictor.candidate_mask(one, one)[0]).flatten()

    def __call__(self, head_ids: np.ndarray | list[int]) -> pa.Table:
        heads = torch.as_tensor(np.asarray(head_ids, dtype=np.int64))
        bs = self.p.batch_size
        tables = [self._batch(heads[s : s + bs]) for s in range(0, heads.numel(), bs)]
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()

    def _batch(self, heads: torch.Tensor) -> pa.Table:
        rels = torch.full_like(heads, self.relation)
        cand = self.candidates
        scores = self.p.scores(heads, rels)[:, cand]  # [B, C] float32
        codes = self.p.known_codes(heads, rels)[:, cand]  # [B, C] int8
        keep = torch.ones_like(codes, dtype=torch.bool)
        if self.known == "filter":
            keep = codes == 0
        masked = torch.where(keep, scores, torch.full_like(scores, float("-inf")))
        k = cand.numel() if self.top_k == 0 else min(self.top_k, cand.numel())
        order = np.argsort(-masked.numpy(), axis=1, kind="stable")[:, :k]  # [B, k]
        counts = keep.sum(dim=1).clamp(max=k).numpy()  # rows per query
        valid = np.arange(k)[None, :] < counts[:, None]
        qi, pos = np.nonzero(valid)  # row-major: by query, then rank
        cols = order[qi, pos]
        tail_ids = cand.numpy()[cols]
        head_ids = heads.numpy()[qi]
        picked = torch.from_numpy(scores.numpy()[qi, cols]).double()
        known = KNOWN_NAMES[codes.numpy()[qi, cols].astype(np.int64)]
        return pa.table(
            {
                "head": pa.array(self.names[head_ids], pa.string()),
                "relation": pa.array([self.relation_name] * len(qi), pa.string()),
                "tail": pa.array(self.names[tail_ids], pa.string()),
                "score": pa.array(picked.numpy()),
                "probability": pa.array(torch.sigmoid(picked).numpy()),
                "rank": pa.array((pos + 1).astype(np.int32)),
                "known": pa.array(known, pa.string()),
                "head_id": pa.array(head_ids),
                "tail_id": pa.array(tail_ids.astype(np.int64)),
            },
            schema=SCHEMA,
        )


def make_scorer(setup: ScorerSetup, device: str) -> BatchScorer:
    """Build a worker's scorer: the checkpoint's model (its configuration: dense or pruned
    with its budget) on ``device``, wrapped in a :class:`Predictor` on the job's graph."""
    from cmpnn_dist.runs.restore import model_from_state
    from cmpnn_dist.storage import open_dataset

    ds = open_dataset(setup.dataset)
    model = model_from_state(
        setup.cfg, setup.state, setup.weights, int(ds.num_relations),
        ds.graph_data("train").num_nodes, bool(ds.inductive),
    )  # fmt: skip
    predictor = Predictor(
        model.eval(), ds, graph=setup.graph, batch_size=setup.batch_size, device=device
    )
    return BatchScorer(predictor, setup.relation, setup.top_k, setup.known)
