"""Selection and packing for pruned propagation (:mod:`cmpnn_dist.model.pruned`).

Per-query sets of nodes are flat sorted ``int64`` *keys* ``b * N + v`` (query b, node v), so
that B queries' subgraphs form one packed graph with no loop over queries:

* :func:`segment_topk`: the top ``k_b`` items of every query by score (ties: the earlier
  item in the input order);
* :func:`out_edges`: the out-edges of a set of (query, node) pairs through a source-sorted
  index of the graph (built once per graph and cached on it);
* :func:`pack_graph`: the packed destination-sorted :class:`~cmpnn_dist.graph.Graph` over the
  union of senders and receivers (rows found through a [B N] int map, no key search), with
  relation ``b * R2 + r`` so that per-query relation parameters become one shared table
  (:func:`pack_relation`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph


def segment_topk(score: Tensor, segment: Tensor, k: int, num_segments: int) -> Tensor:
    """Bool [M] mask of the top-``k`` items of each segment by ``score`` (descending).

    Args: score float [M]; segment int64 [M] in [0, num_segments); k: items kept per segment.
    One stable sort of the int64 key ``segment << 32 | rank bits of -score`` (float32 order);
    ties keep the item that comes first in the input order."""
    count = torch.bincount(segment, minlength=num_segments)
    if bool((count <= k).all()):
        return torch.ones_like(segment, dtype=torch.bool)
    bits = ((-score.detach().float()) + 0.0).contiguous().view(torch.int32).long()  # -0 -> +0
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits) + 2**31  # monotone in [0, 2^32)
    order = torch.sort((segment << 32) | bits, stable=True).indices
    start = torch.cumsum(count, 0) - count
    rank = torch.arange(segment.numel(), device=segment.device) - start[segment[order]]
    keep = torch.zeros_like(segment, dtype=torch.bool)
    keep[order[rank < k]] = True
    return keep


def out_index(graph: Graph) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(out_ptr int64 [N+1], out_edge int64 [E], out_dst [E], out_rel [E])``: a CSR by
    source over the destination-sorted graph (edge ids of each source in edge-id order, and
    their destinations and relations in that order, so that a sender's out-edges are read
    from contiguous memory); cached on ``graph``."""
    key = "pruned_out_index"
    if key not in graph._cache:
        order = torch.sort(graph.src, stable=True).indices
        count = torch.bincount(graph.src, minlength=graph.num_nodes)
        ptr = torch.zeros(graph.num_nodes + 1, dtype=torch.long, device=graph.device)
        ptr[1:] = torch.cumsum(count, 0)
        graph._cache[key] = (ptr, order, graph.dst()[order], graph.rel[order])
    return graph._cache[key]


def out_order_mask(graph: Graph, edge_mask: Tensor) -> Tensor:
    """``edge_mask`` (bool [E], by edge id) in :func:`out_index` order, ``edge_mask[out_edge]``.

    A training mask drops a few edges (those of the batch's query pairs): then the dropped
    ones are cleared in a mask of ones through the cached inverse of ``out_edge`` (one pass
    to find them), instead of gathering all E entries through a permutation."""
    removed = (~edge_mask).nonzero().squeeze(1)
    if removed.numel() * 64 > edge_mask.numel():
        return edge_mask.index_select(0, out_index(graph)[1])
    key = "pruned_out_position"
    if key not in graph._cache:  # out position of each edge id
        out_edge = out_index(graph)[1]
        dtype = torch.int32 if out_edge.numel() < 2**31 else torch.long
        pos = torch.empty(out_edge.numel(), dtype=dtype, device=out_edge.device)
        graph._cache[key] = pos.index_copy_(
            0, out_edge, torch.arange(out_edge.numel(), dtype=dtype, device=out_edge.device)
        )
    keep = torch.ones_like(edge_mask)
    return keep.index_fill_(0, graph._cache[key].index_select(0, removed).long(), False)


def out_edges(graph: Graph, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Every out-edge of each of ``nodes`` (int64 [S]).

    Returns ``(owner int64 [C], pos int64 [C])``: candidate c leaves ``nodes[owner[c]]``; it
    is edge ``out_edge[pos[c]]`` of :func:`out_index` (destination ``out_dst[pos[c]]``,
    relation ``out_rel[pos[c]]``); grouped by owner in input order, then by edge id."""
    ptr = out_index(graph)[0]
    begin = ptr.index_select(0, nodes)
    deg = ptr.index_select(0, nodes + 1) - begin
    owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg)
    first = torch.cumsum(deg, 0) - deg
    shift = torch.repeat_interleave(begin - first, deg)
    return owner, torch.arange(owner.numel(), device=nodes.device) + shift


def pack_graph(
    num_nodes: int, src: Tensor, dst: Tensor, rel: Tensor, num_relations: int
) -> tuple[Graph, Tensor]:
    """The packed message graph of one layer.

    Args:
        num_nodes: P, packed nodes (the layer's (query, node) pairs).
        src, dst: int64 [C] packed endpoints of each kept edge; rel: int64 [C] packed
            relation ids ``b * R2 + r``; num_relations: B * R2.
    Returns ``(graph, order)``: the destination-sorted graph and the permutation that sorts
    the C edges into its rows (gather per-edge data with it).  A stable sort: within a row,
    edges keep their input order (senders by key, then edge id: the dense graph's order).
    """
    order = torch.sort(dst, stable=True).indices
    count = torch.bincount(dst, minlength=num_nodes)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=dst.device)
    indptr[1:] = torch.cumsum(count, 0)
    graph = Graph(num_nodes, num_relations, indptr, src[order].contiguous(), rel[order])
    return graph, order


def pack_relation(
    edge_message: str, relation: Tensor | tuple[Tensor, ...], batch: int, r2: int
) -> Tensor | tuple[Tensor, ...]:
    """Relation parameters over the packed relations ``b * R2 + r`` (one shared table).

    ``basis``: ``(bases, coef [R2, nb])`` -> ``(bases, coef repeated [B R2, nb])``; a vector
    message: ``[B, R2, X]`` -> ``[B R2, X]``, shared ``[R2, X]`` -> repeated ``[B R2, X]``.
    Raises ValueError for a layout it does not know."""
    if edge_message == "basis":
        bases, coef = relation
        return bases, coef.repeat(batch, 1)
    parts = relation if isinstance(relation, tuple) else (relation,)
    out = []
    for t in parts:
        if t.dim() == 3 and t.shape[:2] == (batch, r2):
            out.append(t.reshape(batch * r2, t.shape[-1]))
        elif t.dim() == 2 and t.shape[0] == r2:
            out.append(t.repeat(batch, 1))
        else:
            raise ValueError(
                f"pruned propagation cannot pack message {edge_message!r}'s relation "
                f"parameters of shape {tuple(t.shape)} (expects [B, R2, X] or [R2, X])"
            )
    return tuple(out) if isinstance(relation, tuple) else out[0]
