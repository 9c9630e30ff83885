"""The scorer of one batch-scoring worker: head ids in, the top-k rows of each as Arrow.

Every query of a job is ``(u, q, ?)`` for one relation q.  A part's heads are ranked
``batch_size`` at a time by :meth:`Predictor.rank` (``rank.py``), the ranking ``predict``
and the server use: one forward pass gives ``logit(v | u_b, q)`` for every entity v of every
query b ([B, N]), and

    keep[b, v]  = v has a type of q's tails (all v when untyped)  [and (u_b, q, v) unknown,
                  known="filter"]
    order[b]    = stable argsort of -score[b, keep[b]]  (equal scores keep entity-id order)
    rank        = 1 .. min(k, |keep[b]|)    (top_k=0: k = N, every candidate)

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

from cmpnn_dist.predict.predictor import Predictor
from cmpnn_dist.predict.rank import KNOWN_NAMES

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
        self.k = predictor.graph.num_nodes if self.top_k == 0 else self.top_k
        self.known = known
        self.names = np.array(predictor.entities.names, dtype=object)
        self.relation_name = predictor.relations.names[self.relation]

    def __call__(self, head_ids: np.ndarray | list[int]) -> pa.Table:
        heads = torch.as_tensor(np.asarray(head_ids, dtype=np.int64))
        bs = self.p.batch_size
        tables = [self._table(heads[s : s + bs]) for s in range(0, heads.numel(), bs)]
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()

    def _table(self, heads: torch.Tensor) -> pa.Table:
        """The rows of :meth:`Predictor.rank` for ``heads`` (int64 [B]) as a :data:`SCHEMA`
        table: by query, then rank."""
        ranked = self.p.rank(heads, torch.full_like(heads, self.relation), self.k, None, self.known)
        qi, pos = ranked.flat()  # row-major: by query, then rank
        tail_ids = ranked.ids[qi, pos].numpy()
        head_ids = heads[qi].numpy()
        picked = ranked.scores[qi, pos].double()
        known = KNOWN_NAMES[ranked.known[qi, pos].long().numpy()]
        return pa.table(
            {
                "head": pa.array(self.names[head_ids], pa.string()),
                "relation": pa.array([self.relation_name] * len(qi), pa.string()),
                "tail": pa.array(self.names[tail_ids], pa.string()),
                "score": pa.array(picked.numpy()),
                "probability": pa.array(torch.sigmoid(picked).numpy()),
                "rank": pa.array(ranked.ranks[qi, pos].numpy().astype(np.int32)),
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
