"""Work items of the fused kernels over a CSR, and the combination of split rows' pieces.

A program of :mod:`cmpnn_dist.ops.triton_kernels` walks one *item*: a row's edge range of at
most ``max_edges`` edges.  Longer (hub) rows are cut into pieces whose results land in
separate slots, in the accumulator dtype, and are combined here afterwards (sum: added;
max / min: the extreme, with the smallest arg edge id among ties), then rounded once into
the row.  :func:`prepare` builds the three edge orders the kernels walk (destination-,
source- and relation-sorted) with their items, once per graph and device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph, PerGraph

MAX_EDGES = 1024  # longest edge range one program walks (hub rows are split)
I32_MAX = 2**31 - 1
_PREPARED: PerGraph[tuple[str, int], dict] = PerGraph()  # by (device, max_edges)


def build_items(indptr: Tensor, max_edges: int, own_slots: bool = False) -> dict:
    """Work items over a CSR: rows longer than ``max_edges`` are cut into several items.

    Returns int32 ``row, start, end, slot`` [I] (and ``row64``) and int64 ``extra_rows`` [P]:
    item slots are the row itself for unsplit rows, ``n + i`` for the i-th piece of a split
    row (combined into ``extra_rows[i]`` afterwards; ``extra_unique`` the split rows,
    ``extra_pos`` each piece's index in it).  ``own_slots``: every item writes slot = its
    item index.
    """
    n = indptr.numel() - 1
    dev = indptr.device
    deg = indptr[1:] - indptr[:-1]
    nit = torch.clamp((deg + max_edges - 1) // max_edges, min=1)
    row = torch.repeat_interleave(torch.arange(n, device=dev), nit)
    first = torch.cumsum(nit, 0) - nit
    j = torch.arange(row.numel(), device=dev) - first[row]
    start = indptr[row] + j * max_edges
    end = torch.minimum(start + max_edges, indptr[row + 1])
    if own_slots:
        slot = torch.arange(row.numel(), device=dev)
        extra = row.new_empty(0)
    else:
        split = nit[row] > 1
        slot = torch.where(split, n + torch.cumsum(split.long(), 0) - 1, row)
        extra = row[split]
    i32 = torch.int32
    unique, pos = torch.unique(extra, return_inverse=True)
    return {
        "row": row.to(i32),
        "row64": row,
        "start": start.to(i32),
        "end": end.to(i32),
        "slot": slot.to(i32),
        "n": n,
        "extra_rows": extra,
        "extra_unique": unique,
        "extra_pos": pos,
        "num": int(row.numel()),
        "slots": n + int(extra.numel()) if not own_slots else int(row.numel()),
    }


def prepare(graph: Graph, device: torch.device, max_edges: int = MAX_EDGES) -> dict:
    """int32 edge arrays in dst / src / relation order and their work items, built once per
    (graph, device, max_edges)."""
    return _PREPARED.get(
        graph, (str(device), max_edges), lambda: _prepare(graph, device, max_edges)
    )


def _prepare(graph: Graph, device: torch.device, max_edges: int) -> dict:
    if graph.num_edges >= I32_MAX:
        raise ValueError(f"fused ops need < 2^31 edges, graph has {graph.num_edges}")
    indptr = graph.indptr.to(device)
    src = graph.src.to(device)
    rel = graph.rel.to(device)
    dst = torch.repeat_interleave(torch.arange(graph.num_nodes, device=device), indptr.diff())
    n, r2 = graph.num_nodes, graph.num_relations
    perm = torch.argsort(src, stable=True)  # dst-sorted edge id -> source-sorted position
    t_indptr = torch.zeros(n + 1, dtype=torch.long, device=device)
    t_indptr[1:] = torch.cumsum(torch.bincount(src, minlength=n), 0)
    rperm = torch.argsort(rel, stable=True)
    r_indptr = torch.zeros(r2 + 1, dtype=torch.long, device=device)
    r_indptr[1:] = torch.cumsum(torch.bincount(rel, minlength=r2), 0)
    i32 = torch.int32
    prep = {
        "n": n,
        "r2": r2,
        "src": src.to(i32),
        "rel": rel.to(i32),
        "indptr": indptr,
        "in_degree": indptr.diff(),
        "items": build_items(indptr, max_edges),
        "t_dst": dst[perm].to(i32),
        "t_rel": rel[perm].to(i32),
        "t_eid": perm.to(i32),
        "t_items": build_items(t_indptr, max_edges),
        "r_src": src[rperm].to(i32),
        "r_dst": dst[rperm].to(i32),
        "r_eid": rperm.to(i32),
        "r_items": build_items(r_indptr, max_edges, own_slots=True),
    }
    return prep


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator dtype of the split-row partial sums: float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def partials(items: dict, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """Accumulator-dtype buffer for the pieces of split rows, [pieces, *shape] (>= 1 row)."""
    rows = max(items["slots"] - items["n"], 1)  # exactly the pieces when there are any
    return torch.empty((rows, *shape), dtype=acc_dtype(like.dtype), device=like.device)


def combine_sum(out: Tensor, part: Tensor, items: dict) -> Tensor:
    """Sum the pieces ``part`` [P, ...] of each split row in the accumulator dtype and write
    it, rounded once, into its row of ``out`` [n, ...] (whose other rows are complete)."""
    if items["extra_rows"].numel():
        uniq = items["extra_unique"]
        total = part.new_zeros((uniq.numel(), *part.shape[1:]))
        total.index_add_(0, items["extra_pos"], part)
        out.index_copy_(0, uniq, total.to(out.dtype))  # (not `out[idx] = ...`: a host copy)
    return out


def combine_ext(
    out: Tensor, part: Tensor, arg: Tensor, items: dict, largest: bool
) -> tuple[Tensor, Tensor]:
    """Max / min of split rows from their pieces: ``part`` [P, C] (accumulator dtype) and the
    pieces' arg edge ids ``arg[n:]``; the smallest arg among exact ties.  Writes the split rows
    of ``out`` [n, C] and returns (out, arg[:n])."""
    n = items["n"]
    aout = arg[:n]
    if not items["extra_rows"].numel():
        return out, aout
    uniq, pos = items["extra_unique"], items["extra_pos"]
    fill = float("-inf") if largest else float("inf")
    parg = arg[n:]
    pv = torch.where(parg >= 0, part, fill)
    idx = pos[:, None].expand_as(pv)
    best = pv.new_full((uniq.numel(), pv.shape[1]), fill)
    best.scatter_reduce_(0, idx, pv, "amax" if largest else "amin")
    cand = torch.where((pv == best[pos]) & (parg >= 0), parg, I32_MAX)
    barg = torch.full_like(best, I32_MAX, dtype=arg.dtype).scatter_reduce_(0, idx, cand, "amin")
    none = barg == I32_MAX  # no kept edge in any piece
    out.index_copy_(0, uniq, torch.where(none, 0.0, best).to(out.dtype))
    aout.index_copy_(0, uniq, torch.where(none, -1, barg))
    return out, aout


def kept_in_degree(indptr: Tensor, edge_mask: Tensor) -> Tensor:
    """int64 [N]: number of in-edges per node that ``edge_mask`` keeps (dst-sorted CSR)."""
    cs = torch.zeros(edge_mask.numel() + 1, dtype=torch.long, device=edge_mask.device)
    cs[1:] = torch.cumsum(edge_mask.long(), 0)
    return cs[indptr[1:]] - cs[indptr[:-1]]
