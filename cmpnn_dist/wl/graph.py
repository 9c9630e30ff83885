"""Knowledge graphs for the Weisfeiler-Leman tests (paper section 3.1 and appendix A.5).

A knowledge graph ``G = (V, E, R)`` here is a set of facts ``r(u, v)`` (edge ``u -r-> v``)
held as three int64 arrays ``src, rel, dst`` of length |E|, deduplicated (E is a set).
``N_r(v) = {u | r(u, v) in E}`` are the *in*-neighbours, as in the paper.

The augmented graph (appendix A.5) is

    G^+ = (V, E^+, R^+),   R^+ = R  disjoint-union  {r^- | r in R}   (r^- has id r + |R|)
    E^+ = E  union  {r^-(v, u) | r(u, v) in E, u != v}

(an inverse of a self-loop is *not* added, exactly as the paper writes E^+).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the WL tests themselves need no torch
    from cmpnn_dist.graph import Graph


@dataclass(frozen=True, eq=False)
class KG:
    """A knowledge graph with ``num_nodes`` nodes and ``num_relations`` relation ids.

    Attributes:
        num_nodes: |V|.
        num_relations: number of relation ids (|R|, or 2|R| for an augmented graph).
        src, rel, dst: int64 [|E|], fact ``rel[e](src[e], dst[e])``, sorted by (dst, src, rel),
            no duplicates.
        node_names: optional names (from a TSV), index = node id.
    """

    num_nodes: int
    num_relations: int
    src: np.ndarray
    rel: np.ndarray
    dst: np.ndarray
    node_names: tuple[str, ...] | None = None

    @staticmethod
    def from_triples(
        num_nodes: int,
        num_relations: int,
        triples: np.ndarray,
        node_names: tuple[str, ...] | None = None,
    ) -> KG:
        """Args: triples int64 [F, 3] rows ``(head, relation, tail)``; duplicates are dropped."""
        t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        if len(t) and (t[:, [0, 2]].min() < 0 or t[:, [0, 2]].max() >= num_nodes):
            raise ValueError(f"node ids must lie in [0, {num_nodes})")
        if len(t) and (t[:, 1].min() < 0 or t[:, 1].max() >= num_relations):
            raise ValueError(f"relation ids must lie in [0, {num_relations})")
        t = np.unique(t, axis=0) if len(t) else t
        order = np.lexsort((t[:, 1], t[:, 0], t[:, 2]))
        t = t[order]
        return KG(
            int(num_nodes),
            int(num_relations),
            np.ascontiguousarray(t[:, 0]),
            np.ascontiguousarray(t[:, 1]),
            np.ascontiguousarray(t[:, 2]),
            node_names,
        )

    @staticmethod
    def from_graph(graph: Graph) -> KG:
        """The edge list of a :class:`cmpnn_dist.graph.Graph` (the model's message graph, with
        whatever inverse edges it holds) as a KG over ``graph.num_relations`` relation ids."""
        src = graph.src.cpu().numpy()
        rel = graph.rel.cpu().numpy()
        dst = graph.dst().cpu().numpy()
        return KG.from_triples(
            graph.num_nodes, graph.num_relations, np.stack([src, rel, dst], axis=1)
        )

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def triples(self) -> np.ndarray:
        """int64 [|E|, 3] rows ``(head, relation, tail)``."""
        return np.stack([self.src, self.rel, self.dst], axis=1)

    def augmented(self) -> KG:
        """G^+: every fact plus ``r^-(v, u)`` (id ``r + num_relations``) for each ``r(u, v)``
        with ``u != v``."""
        keep = self.src != self.dst
        inv = np.stack([self.dst[keep], self.rel[keep] + self.num_relations, self.src[keep]], 1)
        return KG.from_triples(
            self.num_nodes,
            2 * self.num_relations,
            np.concatenate([self.triples(), inv]),
            self.node_names,
        )

    def in_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr int64 [|V|+1], order)``: in-edges of v are ``order[indptr[v]:indptr[v+1]]``
        (edges are already sorted by destination, so ``order`` is the identity)."""
        counts = np.bincount(self.dst, minlength=self.num_nodes)
        indptr = np.zeros(self.num_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return indptr, np.arange(self.num_edges)

    def node_id(self, name: str) -> int:
        """The id of a node given by name (TSV graphs) or by integer id."""
        if self.node_names is not None:
            lookup = self.__dict__.get("_lookup")
            if lookup is None:
                lookup = {n: i for i, n in enumerate(self.node_names)}
                object.__setattr__(self, "_lookup", lookup)
            if name in lookup:
                return lookup[name]
            raise KeyError(f"node {name!r} is not in the graph")
        try:
            node = int(name)
        except ValueError:
            raise KeyError(f"node {name!r} is not an integer id") from None
        if not 0 <= node < self.num_nodes:
            raise KeyError(f"node {node} is not in [0, {self.num_nodes})")
        return node


def read_kg(path: str | Path, extra_nodes: tuple[str, ...] = ()) -> tuple[KG, tuple[str, ...]]:
    """Read ``head<TAB>relation<TAB>tail`` lines into a KG (ids in order of first appearance).

    ``extra_nodes``: names of nodes without facts (isolated nodes, as in the paper's
    counterexamples), appended after the nodes of the file when not already there.

    Returns ``(kg, relation_names)``.  Raises :class:`cmpnn_dist.storage.StorageError` naming the
    file and line for a malformed file.
    """
    from cmpnn_dist.convert.tsv import read_tsv
    from cmpnn_dist.storage.errors import StorageError

    table = read_tsv(path)
    if table.num_rows == 0:
        raise StorageError("no facts (empty graph)", Path(path))
    heads = np.asarray(table.column("head").to_pylist(), dtype=object)
    rels = np.asarray(table.column("relation").to_pylist(), dtype=object)
    tails = np.asarray(table.column("tail").to_pylist(), dtype=object)
    extra = np.asarray(extra_nodes, dtype=object)
    nodes = _first_seen(np.concatenate([np.stack([heads, tails], 1).reshape(-1), extra]))
    relations = _first_seen(rels)
    node_ix = {n: i for i, n in enumerate(nodes)}
    rel_ix = {r: i for i, r in enumerate(relations)}
    triples = np.array(
        [(node_ix[h], rel_ix[r], node_ix[t]) for h, r, t in zip(heads, rels, tails, strict=True)],
        dtype=np.int64,
    )
    return KG.from_triples(len(nodes), len(relations), triples, tuple(nodes)), tuple(relations)


def _first_seen(values: np.ndarray) -> list[str]:
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)
