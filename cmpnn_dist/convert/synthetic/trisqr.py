"""TRI-SQR (paper appendix H): graph pairs that only a global readout can tell apart.

Relations: ``r0 = 0`` (the query relation), ``r1 = 1``, ``r2 = 2``.  For each of
``num_pairs`` pairs:

1. ``G_init``: an Erdos-Renyi graph on 5 nodes with ``p ~ U(0.2, 0.8)``; each edge gets a
   random direction and a random relation in {r1, r2}; a random node is the source ``u``.
2. ``G1 = G_init + triangle(r1) + triangle(r2)`` (directed 3-cycles), 11 nodes;
   positives: ``r0(u, v)`` for the 3 nodes ``v`` of the r1 triangle, negatives: the r2 triangle.
3. ``G2 = G_init + square(r1) + square(r2)`` (directed 4-cycles), 13 nodes;
   positives: the 4 nodes of the r2 square, negatives: the r1 square.

The first ``round(0.7 * num_pairs)`` pairs are "train", the rest "test" (70/30 pairs, 140/60
graphs and 490/210 positive triples for 100 pairs).  ``triples`` holds the r1/r2 edges and the
r0 positive facts; the r0 facts are the queries, not message-passing edges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cmpnn_dist.convert.synthetic.params import merge_params
from cmpnn_dist.storage.writer import GraphSpec

R0, R1, R2 = 0, 1, 2
RELATIONS = ["r0", "r1", "r2"]
INIT_NODES = 5


@dataclass
class TriSqrGraph:
    """One small TRI-SQR graph.

    Attributes:
        num_nodes: 11 (triangles) or 13 (squares).
        triples: int64 [F, 3] ``(h, r, t)``: r1/r2 edges, then the r0 positive facts.
        source: the query node u.  positives / negatives: candidate tails v of ``r0(u, v)``.
        split: "train" or "test".  pair: index of its pair.  kind: "tri" (G1) or "sqr" (G2).
    """

    num_nodes: int
    triples: Tensor
    source: int
    positives: list[int]
    negatives: list[int]
    split: str
    pair: int
    kind: str


def _cycle(start: int, length: int, rel: int) -> list[tuple[int, int, int]]:
    return [(start + i, rel, start + (i + 1) % length) for i in range(length)]


def trisqr_graphs(
    num_pairs: int = 100, seed: int = 0, train_fraction: float = 0.7
) -> list[TriSqrGraph]:
    """The ``2 * num_pairs`` graphs, pair by pair (G1 then G2), deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    n_train = int(round(train_fraction * num_pairs))
    out = []
    for pair in range(num_pairs):
        p = rng.uniform(0.2, 0.8)
        init = []
        for a in range(INIT_NODES):
            for b in range(a + 1, INIT_NODES):
                if rng.random() < p:
                    h, t = (a, b) if rng.random() < 0.5 else (b, a)
                    init.append((h, int(rng.integers(R1, R2 + 1)), t))
        u = int(rng.integers(INIT_NODES))
        split = "train" if pair < n_train else "test"
        for kind, size, pos_rel in (("tri", 3, R1), ("sqr", 4, R2)):
            s1, s2 = INIT_NODES, INIT_NODES + size  # r1 cycle, then r2 cycle
            edges = init + _cycle(s1, size, R1) + _cycle(s2, size, R2)
            pos_start = s1 if pos_rel == R1 else s2
            neg_start = s2 if pos_rel == R1 else s1
            positives = list(range(pos_start, pos_start + size))
            negatives = list(range(neg_start, neg_start + size))
            queries = [(u, R0, v) for v in positives]
            triples = torch.tensor(edges + queries, dtype=torch.int64).reshape(-1, 3)
            out.append(
                TriSqrGraph(
                    INIT_NODES + 2 * size, triples, u, positives, negatives, split, pair, kind
                )
            )
    return out


def _union(
    graphs: list[TriSqrGraph],
) -> tuple[int, np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Disjoint union -> (N, message facts (r1/r2) [E, 3], r0 facts [Q, 3], names,
    counterpart negatives r0(u, v) [Q', 3] for v in the other triangle / square)."""
    off, edges, queries, names, negatives = 0, [], [], [], []
    for g in graphs:
        t = g.triples.numpy().copy()
        t[:, [0, 2]] += off
        edges.append(t[t[:, 1] != R0])
        queries.append(t[t[:, 1] == R0])
        negatives.append([(g.source + off, R0, v + off) for v in g.negatives])
        names += [f"{g.split}{g.pair}_{g.kind}::{i}" for i in range(g.num_nodes)]
        off += g.num_nodes
    neg = np.asarray([x for part in negatives for x in part], dtype=np.int64).reshape(-1, 3)
    return off, np.concatenate(edges), np.concatenate(queries), names, neg


def build_trisqr(params: dict | None = None) -> dict:
    """Inductive dataset: graph "train" = the training graphs, graph "test" = the test graphs.

    Graph "train": train facts = r1/r2 edges + the r0 positives (the training queries), with
    r0 marked query-only so its message-passing graph holds the r1/r2 edges only; graph "test":
    train facts = its r1/r2 edges, test facts = its r0 positives.
    """
    p = merge_params(
        {"num_pairs": 100, "seed": 0, "train_fraction": 0.7}, params, "synthetic:trisqr"
    )
    graphs = trisqr_graphs(int(p["num_pairs"]), int(p["seed"]), float(p["train_fraction"]))
    tr = _union([g for g in graphs if g.split == "train"])
    te = _union([g for g in graphs if g.split == "test"])
    train_facts = {"train": np.concatenate([tr[1], tr[2]])}
    specs = {
        "train": GraphSpec(tr[0], tr[3], None, train_facts, query_only_relations=(R0,)),
        "test": GraphSpec(te[0], te[3], None, {"train": te[1], "test": te[2]}),
    }
    return {
        "relation_names": RELATIONS,
        "graphs": specs,
        "inductive": True,
        "node_type_names": [],
        "meta": {
            "generator": "trisqr",
            "params": p,
            "labeled_negatives": {"test": te[4].tolist()},
        },
    }
