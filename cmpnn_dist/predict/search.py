"""Beam search for the most important paths, given per-layer edge importances.

See :func:`beam_search_paths`; :mod:`cmpnn_dist.predict.explain` computes the importances
(edge-weight gradients) and names the paths.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph

_HASH = 1_000_003  # edge-sequence hash: h' = h * _HASH + e + 1 (int64, wrapping)


def _top_per_group(value: Tensor, group: Tensor, ident: Tensor, beam: int) -> tuple[Tensor, Tensor]:
    """Indices of the kept candidates and their slot: the best candidate of each distinct
    ``(group, ident)`` (an edge sequence reached twice keeps its best layer assignment), then
    the ``beam`` best of each group, in descending value."""
    order = torch.sort(value, descending=True, stable=True)[1]
    _, inverse = torch.unique(
        torch.stack([group[order], ident[order]], 1), dim=0, return_inverse=True
    )
    first = torch.full((int(inverse.max()) + 1,), order.numel(), device=value.device)
    first = first.scatter_reduce(
        0, inverse, torch.arange(order.numel(), device=value.device), "amin"
    )
    order = order[torch.sort(first)[0]]  # still by descending value
    order = order[torch.sort(group[order], stable=True)[1]]
    g = group[order]
    counts = torch.bincount(g)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(g.numel(), device=g.device) - start[g]
    keep = pos < beam
    return order[keep], pos[keep]


def beam_search_paths(
    graph: Graph,
    grads: Tensor,
    source: int,
    target: int,
    k: int = 5,
    beam: int = 10,
    wait: bool = True,
) -> list[tuple[float, list[int], list[int]]]:
    """The ``k`` best paths from ``source`` to ``target``:
    ``[(mean importance, [edge ids], [layer of each edge])]``, best first.

    A path's l-th edge is taken at layer t_l with t_1 < t_2 < ... (``wait=True``: a message
    may wait at a node, the f(t) = t history and the shortcut keep h^(t)) or t_l = l - 1
    (``wait=False``: NBFNet's scheme); its importance is ``mean_l grads[t_l, e_l]`` and each
    edge sequence counts once, with its best layer assignment.  Edges out of ``target`` and
    (edge, layer) pairs of exactly zero gradient (no influence on the logit) are not used.
    For every layer, node and path length the ``beam`` best partial paths (by summed
    importance) are kept; the best path of each length is exact for any ``beam``.

    Args:
        graph: the message graph (edge e = ``src[e] -rel[e]-> dst[e]``).
        grads: float [T, E] edge importances per layer (:func:`edge_gradients`).
        source, target: node ids.  k: paths returned.  beam: partial paths kept per state.
    """
    num_layers, num_nodes = grads.shape[0], graph.num_nodes
    dev = graph.device
    grads = grads.to(dev)
    src, dst = graph.src, graph.dst()
    usable = src != target
    lengths = num_layers + 1  # path lengths 0..T; 0 is the empty path at the source
    dist = torch.full((num_nodes, lengths, beam), float("-inf"), device=dev)
    ident = torch.zeros((num_nodes, lengths, beam), dtype=torch.long, device=dev)
    dist[source, 0, 0] = 0.0
    backs: list[tuple[Tensor, Tensor]] = []
    found: list[tuple[float, int, int, int]] = []  # (sum, last layer, length, slot)
    for t in range(num_layers):
        parts: list[tuple[Tensor, ...]] = []  # (value, node, length, ident, edge, prev slot)
        if wait:
            x, ln, s = torch.nonzero(torch.isfinite(dist), as_tuple=True)
            parts.append((dist[x, ln, s], x, ln, ident[x, ln, s], torch.full_like(x, -1), s))
        active = usable & (grads[t] != 0)
        for ln in range(1, lengths):
            prev = dist[:, ln - 1]
            edges = torch.nonzero(active & torch.isfinite(prev[src, 0])).squeeze(1)
            if edges.numel() == 0:
                continue
            cand = prev[src[edges]] + grads[t, edges].unsqueeze(1)
            row, s = torch.nonzero(torch.isfinite(cand), as_tuple=True)
            e = edges[row]
            new_ident = ident[src[e], ln - 1, s] * _HASH + e + 1
            parts.append((cand[row, s], dst[e], torch.full_like(e, ln), new_ident, e, s))
        dist = torch.full_like(dist, float("-inf"))
        edge_t = torch.full(dist.shape, -2, dtype=torch.long, device=dev)
        slot_t = torch.full_like(edge_t, -1)
        if parts:
            value, node, ln, idn, edge, slot = (torch.cat(c) for c in zip(*parts, strict=True))
            keep, pos = _top_per_group(value, node * lengths + ln, idn, beam)
            where = (node[keep], ln[keep], pos)
            dist[where] = value[keep]
            ident[where] = idn[keep]
            edge_t[where] = edge[keep]
            slot_t[where] = slot[keep]
        backs.append((edge_t.cpu(), slot_t.cpu()))
        if not wait:  # NBFNet: paths of length t + 1 end at layer t
            ends = dist[target, t + 1].cpu()
            found += [(float(v), t, t + 1, s) for s, v in enumerate(ends.tolist()) if v > -1e300]
    if wait:
        ends = dist[target].cpu()
        found += [
            (float(ends[ln, s]), num_layers - 1, ln, s)
            for ln in range(1, lengths)
            for s in range(beam)
            if torch.isfinite(ends[ln, s])
        ]
    src_cpu = src.cpu()
    paths = []
    for total, last, length, s in found:
        node, ln, edges, layers = target, length, [], []
        for t in range(last, -1, -1):
            e, prev_slot = int(backs[t][0][node, ln, s]), int(backs[t][1][node, ln, s])
            if e >= 0:
                edges.append(e)
                layers.append(t)
                node, ln = int(src_cpu[e]), ln - 1
            s = prev_slot
        paths.append((total / length, edges[::-1], layers[::-1]))
    paths.sort(key=lambda p: -p[0])
    return paths[:k]
