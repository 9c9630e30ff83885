"""Selection and packing for pruned propagation (:mod:`cmpnn_dist.model.pruned`).

Per-query sets of nodes are flat sorted ``int64`` *keys* ``b * N + v`` (query b, node v), so
that B queries' subgraphs form one packed graph with no loop over queries:

* :func:`segment_topk`: the top ``k_b`` items of every query by score (ties: the earlier
  item in the input order);
* :func:`out_edges`: the out-edges of a set of (query, node) pairs through the graph's
  source-sorted index (:meth:`~cmpnn_dist.graph.Graph.out_index`);
* :func:`pack_graph`: the packed destination-sorted :class:`~cmpnn_dist.graph.Graph` over the
  union of senders and receivers (rows found through a [B N] int map, no key search), with
  relation ``b * R2 + r`` so that per-query relation parameters become one shared table
  (:meth:`~cmpnn_dist.model.messages.MessageFunction.pack`);
* :func:`select_senders` and :func:`select_subgraph`: one layer's senders and packed subgraph
  in torch, the reference of the compiled CPU selection (``ops/cpu_select.cpp``: the same
  senders and graph, a histogram cut and a counting sort per query instead of sorts).
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


def out_order_mask(graph: Graph, edge_mask: Tensor) -> Tensor:
    """``edge_mask`` (bool [E], by edge id) in out-edge order (:meth:`Graph.out_index`),
    ``edge_mask[out_edge]``.

    A training mask drops a few edges (those of the batch's query pairs): then the dropped
    ones are cleared in a mask of ones through the inverse of ``out_edge``
    (:meth:`Graph.out_position`; one pass to find them), instead of gathering all E entries
    through a permutation."""
    removed = (~edge_mask).nonzero().squeeze(1)
    if removed.numel() * 64 > edge_mask.numel():
        return edge_mask.index_select(0, graph.out_index().edge)
    keep = torch.ones_like(edge_mask)
    return keep.index_fill_(0, graph.out_position().index_select(0, removed).long(), False)


def out_edges(graph: Graph, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Every out-edge of each of ``nodes`` (int64 [S]).

    Returns ``(owner int64 [C], pos int64 [C])``: candidate c leaves ``nodes[owner[c]]``; it
    is edge ``edge[pos[c]]`` of :meth:`Graph.out_index` (destination ``dst[pos[c]]``,
    relation ``rel[pos[c]]``); grouped by owner in input order, then by edge id."""
    ptr = graph.out_index().ptr
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


def select_senders(keys: Tensor, score: Tensor, n: int, batch: int, k: int) -> Tensor:
    """The sorted keys (int64 [S]) of the top-``k`` visited keys of each query by ``score``
    (keys int64 [M] ``b n + v``, score float [M]; ties: the earlier row)."""
    send = segment_topk(score, keys // n, k, batch).nonzero().squeeze(1)
    return torch.sort(keys[send]).values  # by key: edge ties go to the smaller node id


def select_subgraph(
    s_keys: Tensor,
    graph: Graph,
    batch: int,
    edge_mask: Tensor | None,
    slot: Tensor,
    score: Tensor,
    const_score: Tensor,
    e: int,
    with_edges: bool,
    pmap: Tensor,
) -> tuple[Tensor, Tensor, Graph, Tensor | None]:
    """The packed subgraph of one layer: the top-``e`` out-edges per query of the senders
    ``s_keys`` (int64 [S], sorted keys ``b N + v``) kept by ``edge_mask`` (bool [E]), ranked
    by their receiver's score: ``score[slot[key]]`` (float [M]) for a visited receiver, else
    ``const_score[b]`` (float [B]); ties keep the candidate order (senders by key, then edge
    id).  ``pmap``: int [B N] scratch (its entries at the packed keys are overwritten).

    Returns ``(node_keys int64 [P], s_rows int64 [S], packed, edge int64 [C] or None)``: the
    sorted keys of the senders and receivers (the packed rows), each sender's row, the
    receiver-sorted packed graph (relation ``b * R2 + r``; within a row, edges by sender key,
    then edge id) and the graph's id of each packed edge (only ``with_edges``)."""
    n, r2 = graph.num_nodes, graph.num_relations
    s_b = s_keys // n
    owner, pos = out_edges(graph, s_keys - s_b * n)
    _, out_edge, out_dst, out_rel = graph.out_index()

    def take(idx: Tensor, *arrays: Tensor) -> list[Tensor]:
        return [a.index_select(0, idx) for a in arrays]

    edge = out_edge.index_select(0, pos)
    if edge_mask is not None:
        kept = edge_mask.index_select(0, edge).nonzero().squeeze(1)
        owner, pos, edge = take(kept, owner, pos, edge)
    e_b = s_b.index_select(0, owner)
    r_keys = e_b * n + out_dst.index_select(0, pos)
    if edge.numel() and bool((torch.bincount(e_b, minlength=batch) > e).any()):
        rows = slot.index_select(0, r_keys).long()
        known = score.detach().index_select(0, rows.clamp(min=0))
        r_score = torch.where(rows >= 0, known, const_score.detach().index_select(0, e_b))
        keep = segment_topk(r_score, e_b, e, batch).nonzero().squeeze(1)
        owner, pos, edge, e_b, r_keys = take(keep, owner, pos, edge, e_b, r_keys)
    rel = e_b * r2 + out_rel.index_select(0, pos)
    mark = torch.zeros(batch * n, dtype=torch.bool, device=s_keys.device)
    mark[s_keys] = True
    mark[r_keys] = True
    node_keys = mark.nonzero().squeeze(1)  # sorted (query, node) keys of the subgraph
    pmap[node_keys] = torch.arange(node_keys.numel(), device=s_keys.device, dtype=pmap.dtype)
    s_rows = pmap[s_keys].long()
    packed, order = pack_graph(
        node_keys.numel(),
        s_rows.index_select(0, owner),
        pmap.index_select(0, r_keys).long(),
        rel,
        batch * r2,
    )
    return node_keys, s_rows, packed, edge[order] if with_edges else None
