"""The in-memory message-passing graph shared by storage, ops, model and training.

A :class:`Graph` is a multi-relational graph in CSR form sorted by *destination*:
the in-edges of node ``v`` are ``indptr[v]:indptr[v+1]``, with source ``src[e]`` and
relation ``rel[e]``.  Facts ``(h, r, t)`` are stored as the edge ``h -r-> t`` and, when
inverse edges are on, the edge ``t -(r+|R|)-> h``; ``num_relations`` counts both
directions (``2 |R|``).  Within a row, edges are ordered by ``(src, rel)``.

Structures derived from the edges are built on first use and kept with the graph: the ones of
general use by :class:`Graph`'s methods (:meth:`Graph.dst`, :meth:`Graph.out_index`,
:meth:`Graph.out_position`, :meth:`Graph.relation_pairs`, :meth:`Graph.indptr_numpy`,
:meth:`Graph.max_in_degree`, the sorted keys of :meth:`Graph.query_edge_mask`), a layout of
one ops kernel by that kernel's module in a :class:`PerGraph` cache.  A graph's tensors are not
changed in place; code that does so calls :meth:`Graph.invalidate`, which drops all of them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

import numpy as np
import torch
from torch import Tensor


class OutIndex(NamedTuple):
    """The edges by source: a CSR over the destination-sorted edge ids.

    ptr: int64 [N+1]; edge: int64 [E], the edge ids of each source in edge-id order, so that a
    node's out-edges are read from contiguous memory; dst, rel: int64 [E], theirs in that
    order."""

    ptr: Tensor
    edge: Tensor
    dst: Tensor
    rel: Tensor


class RelationPairs(NamedTuple):
    """The distinct (destination, relation) pairs of the edges, sorted: node, rel int64 [P];
    edge_pair int64 [E], the pair of each edge; counts int64 [P], each pair's edges."""

    node: Tensor
    rel: Tensor
    edge_pair: Tensor
    counts: Tensor


@dataclass
class _Views:
    """A graph's derived structures, each built by the :class:`Graph` method of its name."""

    dst: Tensor | None = None
    sorted_keys: dict[str, tuple[Tensor, Tensor, int]] = field(default_factory=dict)
    out_index: OutIndex | None = None
    out_position: Tensor | None = None
    relation_pairs: RelationPairs | None = None
    indptr_numpy: np.ndarray | None = None
    max_in_degree: int | None = None


@dataclass(eq=False)
class Graph:
    """Destination-sorted CSR graph.

    Attributes:
        num_nodes: |V|.
        num_relations: number of edge relation ids (2|R| with inverse edges).
        indptr: int64 [|V|+1], row offsets by destination node.
        src: int64 [|E|], source node of each edge.
        rel: int64 [|E|], relation id of each edge.
    """

    num_nodes: int
    num_relations: int
    indptr: Tensor
    src: Tensor
    rel: Tensor
    _views: _Views = field(default_factory=_Views, init=False, repr=False)
    _version: int = field(default=0, init=False, repr=False)  # see version

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @property
    def device(self) -> torch.device:
        return self.src.device

    @property
    def version(self) -> int:
        """How many times :meth:`invalidate` ran (a cache kept elsewhere compares it)."""
        return self._version

    def invalidate(self) -> None:
        """Drop every structure derived from the edges (this class's and every
        :class:`PerGraph` entry of this graph): call after changing indptr, src or rel in
        place."""
        self._views = _Views()
        self._version += 1

    def dst(self) -> Tensor:
        """int64 [|E|]: destination of each edge (expanded from ``indptr``)."""
        if self._views.dst is None:
            deg = self.indptr[1:] - self.indptr[:-1]
            nodes = torch.arange(self.num_nodes, device=self.indptr.device)
            self._views.dst = torch.repeat_interleave(nodes, deg)
        return self._views.dst

    def in_degree(self) -> Tensor:
        """int64 [|V|]: number of in-edges of each node."""
        return self.indptr[1:] - self.indptr[:-1]

    def max_in_degree(self) -> int:
        """The largest in-degree (0 without nodes)."""
        if self._views.max_in_degree is None:
            degree = self.in_degree()
            self._views.max_in_degree = int(degree.max()) if degree.numel() else 0
        return self._views.max_in_degree

    def indptr_numpy(self) -> np.ndarray:
        """``indptr`` as a host numpy array (int64 [|V|+1])."""
        if self._views.indptr_numpy is None:
            self._views.indptr_numpy = self.indptr.cpu().numpy()
        return self._views.indptr_numpy

    def out_index(self) -> OutIndex:
        """The edges by source (:class:`OutIndex`): a stable sort of ``src``."""
        if self._views.out_index is None:
            order = torch.sort(self.src, stable=True).indices
            count = torch.bincount(self.src, minlength=self.num_nodes)
            ptr = torch.zeros(self.num_nodes + 1, dtype=torch.long, device=self.device)
            ptr[1:] = torch.cumsum(count, 0)
            self._views.out_index = OutIndex(ptr, order, self.dst()[order], self.rel[order])
        return self._views.out_index

    def out_position(self) -> Tensor:
        """int32 (int64 from 2^31 edges) [|E|]: the position of each edge id in
        :meth:`out_index` order (the inverse of its ``edge``)."""
        if self._views.out_position is None:
            out_edge = self.out_index().edge
            dtype = torch.int32 if out_edge.numel() < 2**31 else torch.long
            pos = torch.empty(out_edge.numel(), dtype=dtype, device=out_edge.device)
            self._views.out_position = pos.index_copy_(
                0, out_edge, torch.arange(out_edge.numel(), dtype=dtype, device=out_edge.device)
            )
        return self._views.out_position

    def relation_pairs(self) -> RelationPairs:
        """The distinct (destination, relation) pairs of the edges (:class:`RelationPairs`)."""
        if self._views.relation_pairs is None:
            r2 = self.num_relations
            pair_key, edge_pair, counts = torch.unique(
                self.dst() * r2 + self.rel, return_inverse=True, return_counts=True
            )
            self._views.relation_pairs = RelationPairs(
                pair_key // r2, pair_key % r2, edge_pair, counts
            )
        return self._views.relation_pairs

    def to(self, device: torch.device | str) -> Graph:
        return Graph(
            self.num_nodes,
            self.num_relations,
            self.indptr.to(device),
            self.src.to(device),
            self.rel.to(device),
        )

    # ------------------------------------------------------------------ lookups
    def _triple_key(self, src: Tensor, rel: Tensor, dst: Tensor) -> Tensor:
        return (src * self.num_relations + rel) * self.num_nodes + dst

    def _pair_keys(self, a: Tensor, b: Tensor) -> Tensor:
        """Keys of the pairs ``a[i] -> b[i]`` and ``b[i] -> a[i]`` (any relation)."""
        return torch.cat([a * self.num_nodes + b, b * self.num_nodes + a])

    def _sorted_keys(self, kind: str) -> tuple[Tensor, Tensor, int]:
        """Sorted int64 edge keys, the edge ids in that order and the longest run of equal keys
        (parallel edges), cached.  ``kind``: ``triple`` ``(src * R + rel) * N + dst`` or
        ``pair`` ``src * N + dst`` (any relation)."""
        if kind not in self._views.sorted_keys:
            if kind == "triple":
                keys = self._triple_key(self.src, self.rel, self.dst())
            else:
                keys = self.src * self.num_nodes + self.dst()
            sorted_keys, order = torch.sort(keys)
            runs = torch.unique_consecutive(sorted_keys, return_counts=True)[1]
            longest = int(runs.max()) if runs.numel() else 0
            self._views.sorted_keys[kind] = (sorted_keys, order, longest)
        return self._views.sorted_keys[kind]

    def query_edge_mask(
        self, triples: Tensor, mode: str = "query", negatives: Tensor | None = None
    ) -> Tensor | None:
        """Boolean keep-mask [|E|] that removes the edges connecting each query pair.

        Built without reading anything back from the device (no host sync on CUDA).

        Args:
            triples: int64 [B, 3] facts ``(h, r, t)`` with ``r < num_relations // 2``
                (original direction), or with inverse ids; both directions are removed.
            mode: ``none`` (returns None), ``query`` (the fact's edge and its inverse),
                ``one_hop`` (every edge between h and t, any relation, both directions),
                ``candidates`` (every edge between h and t *or any of h's sampled negatives*,
                any relation, both directions: NBFNet's and the C-MPNN code's
                ``remove_one_hop``, which matches all (head, candidate) pairs of the batch so
                that "directly linked to u" says nothing about positive vs negative).
            negatives: int64 [B, k] negative tails of each query; ``candidates`` only.
        """
        if mode == "none":
            return None
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        if mode == "query":
            half = self.num_relations // 2
            r_fwd = torch.where(r >= half, r - half, r)
            h_fwd = torch.where(r >= half, t, h)
            t_fwd = torch.where(r >= half, h, t)
            query = torch.cat(
                [
                    self._triple_key(h_fwd, r_fwd, t_fwd),
                    self._triple_key(t_fwd, r_fwd + half, h_fwd),
                ]
            )
            kind = "triple"
        elif mode == "one_hop":
            query, kind = self._pair_keys(h, t), "pair"
        elif mode == "candidates":
            if negatives is None or negatives.shape[0] != triples.shape[0]:
                raise ValueError("query_edge_mask(mode='candidates') needs negatives [B, k]")
            cand = torch.cat([t.unsqueeze(1), negatives], dim=1)  # [B, 1 + k]
            query = self._pair_keys(h.unsqueeze(1).expand_as(cand).reshape(-1), cand.reshape(-1))
            kind = "pair"
        else:
            raise ValueError(
                f"unknown query-edge removal mode {mode!r} (none | query | one_hop | candidates)"
            )
        return _keep_mask(*self._sorted_keys(kind), query)


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerGraph(Generic[K, V]):
    """A structure that one module derives from graphs in its own format (an ops kernel's
    edge layout), kept by that module: one value per (graph, key), built on first use,
    forgotten with the graph (weak keys) or when the graph is invalidated."""

    def __init__(self) -> None:
        self._entries: weakref.WeakKeyDictionary[Graph, tuple[int, dict[K, V]]] = (
            weakref.WeakKeyDictionary()
        )

    def _values(self, graph: Graph) -> dict[K, V]:
        version, values = self._entries.get(graph, (-1, {}))
        if version != graph.version:
            values = {}
            self._entries[graph] = (graph.version, values)
        return values

    def get(self, graph: Graph, key: K, build: Callable[[], V]) -> V:
        """The value of ``(graph, key)``, ``build()`` the first time."""
        values = self._values(graph)
        if key not in values:
            values[key] = build()
        return values[key]

    def put(self, graph: Graph, key: K, value: V) -> None:
        """Set the value of ``(graph, key)`` (a value built alongside the graph)."""
        self._values(graph)[key] = value

    def __len__(self) -> int:
        """The number of live graphs with entries."""
        return len(self._entries)


def _keep_mask(sorted_keys: Tensor, order: Tensor, longest: int, query: Tensor) -> Tensor:
    """bool [|E|]: False at every edge whose key equals a key in ``query``, True elsewhere.

    Each query key matches a run ``lo:hi`` of at most ``longest`` sorted keys, so the matches
    are the [Q, longest] grid ``lo + j`` cut at ``hi``; cells past ``hi`` write to a spare
    slot |E| instead of being filtered out (a filter would read a count back to the host).
    """
    num_edges = order.numel()
    mask = torch.ones(num_edges + 1, dtype=torch.bool, device=order.device)
    if longest and query.numel():
        lo = torch.searchsorted(sorted_keys, query, right=False)
        hi = torch.searchsorted(sorted_keys, query, right=True)
        pos = lo[:, None] + torch.arange(longest, device=lo.device)  # [Q, longest]
        hit = pos < hi[:, None]
        ids = torch.where(hit, order[pos.clamp(max=num_edges - 1)], num_edges)
        mask.index_fill_(0, ids.reshape(-1), False)
    return mask[:num_edges]


def build_csr(
    num_nodes: int, num_relations: int, triples: np.ndarray, add_inverse: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Build destination-sorted CSR arrays from facts.

    Args:
        num_nodes: |V|.
        num_relations: |R| (original relations, without inverses).
        triples: int64 [F, 3] facts ``(h, r, t)``.
        add_inverse: also store ``t -(r+|R|)-> h``.

    Returns:
        ``(indptr [|V|+1], src [|E|], rel [|E|])`` int64 arrays; rows sorted by (src, rel).
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
    if add_inverse:
        src = np.concatenate([h, t])
        rel = np.concatenate([r, r + num_relations])
        dst = np.concatenate([t, h])
    else:
        src, rel, dst = h, r, t
    order = np.lexsort((rel, src, dst))
    src, rel, dst = src[order], rel[order], dst[order]
    counts = np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, src.astype(np.int64), rel.astype(np.int64)


def graph_from_triples(
    num_nodes: int, num_relations: int, triples: np.ndarray | Tensor, add_inverse: bool = True
) -> Graph:
    """Convenience constructor for tests and small in-memory graphs."""
    if isinstance(triples, Tensor):
        triples = triples.cpu().numpy()
    indptr, src, rel = build_csr(num_nodes, num_relations, triples, add_inverse)
    total = num_relations * (2 if add_inverse else 1)
    return Graph(
        num_nodes, total, torch.from_numpy(indptr), torch.from_numpy(src), torch.from_numpy(rel)
    )
