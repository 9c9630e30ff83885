"""The in-memory message-passing graph shared by storage, ops, model and training.

A :class:`Graph` is a multi-relational graph in CSR form sorted by *destination*:
the in-edges of node ``v`` are ``indptr[v]:indptr[v+1]``, with source ``src[e]`` and
relation ``rel[e]``.  Facts ``(h, r, t)`` are stored as the edge ``h -r-> t`` and, when
inverse edges are on, the edge ``t -(r+|R|)-> h``; ``num_relations`` counts both
directions (``2 |R|``).  Within a row, edges are ordered by ``(src, rel)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor


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
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @property
    def device(self) -> torch.device:
        return self.src.device

    def dst(self) -> Tensor:
        """int64 [|E|]: destination of each edge (expanded from ``indptr``)."""
        if "dst" not in self._cache:
            deg = self.indptr[1:] - self.indptr[:-1]
            nodes = torch.arange(self.num_nodes, device=self.indptr.device)
            self._cache["dst"] = torch.repeat_interleave(nodes, deg)
        return self._cache["dst"]

    def in_degree(self) -> Tensor:
        """int64 [|V|]: number of in-edges of each node."""
        return self.indptr[1:] - self.indptr[:-1]

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
        if kind not in self._cache:
            if kind == "triple":
                keys = self._triple_key(self.src, self.rel, self.dst())
            else:
                keys = self.src * self.num_nodes + self.dst()
            sorted_keys, order = torch.sort(keys)
            runs = torch.unique_consecutive(sorted_keys, return_counts=True)[1]
            longest = int(runs.max()) if runs.numel() else 0
            self._cache[kind] = (sorted_keys, order, longest)
        return self._cache[kind]

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
