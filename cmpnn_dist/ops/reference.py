"""Plain-torch message passing in destination-row blocks (the CPU training path).

Equations: see :mod:`cmpnn_dist.ops`.  The kept edges (edge_mask applied, CSR order kept) are
cut into *blocks* of consecutive destination rows ``[r0, r1)`` whose in-edges number at most
``max_edges = chunk_elements // (B d)``; a block's outputs are the rows ``r0:r1`` of the result,
so block results are concatenated.  A single hub row with more in-edges than ``max_edges`` is
its own block, split into edge *pieces* of at most ``max_edges`` edges whose partial reductions
are combined (sum: +, max/min: elementwise max/min).  No more than one piece of messages
(``<= chunk_elements`` entries) exists at a time, in forward and in backward:

* ``mul`` messages with ``sum`` / ``sumsq``: a custom autograd Function whose backward recomputes
  per piece ``d x[src] += w[rel] * g[dst]`` and ``d w[rel] += x[src] * g[dst]`` (no forward rerun);
  ``sumsq`` is the same kernel on ``(x**2, w**2)`` since ``(x w)**2 = x**2 w**2``.
* everything else (``max`` / ``min``, ``basis`` messages): each piece runs under
  ``torch.utils.checkpoint`` (``use_reentrant=False``), so backward recomputes its messages.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from cmpnn_dist.graph import Graph

Block = tuple[int, int, list[tuple[int, int]]]  # rows [r0, r1), edge pieces [(e0, e1), ...]

# Pieces larger than this many message entries (4 MiB of float32) stop fitting in cache and
# run slower on CPU, so the effective budget is min(chunk_elements, CACHE_ELEMENTS).
CACHE_ELEMENTS = 1 << 20


def make_blocks(indptr: np.ndarray, max_edges: int) -> list[Block]:
    """Greedy destination-row blocks of at most ``max_edges`` in-edges (hub rows split)."""
    n = len(indptr) - 1
    max_edges = max(1, int(max_edges))
    blocks: list[Block] = []
    r0 = 0
    while r0 < n:
        r1 = min(int(np.searchsorted(indptr, indptr[r0] + max_edges, side="right")) - 1, n)
        if r1 <= r0:  # hub row: more in-edges than the budget
            r1 = r0 + 1
            e0, e1 = int(indptr[r0]), int(indptr[r1])
            pieces = [(a, min(a + max_edges, e1)) for a in range(e0, e1, max_edges)]
        else:
            pieces = [(int(indptr[r0]), int(indptr[r1]))]
        blocks.append((r0, r1, pieces))
        r0 = r1
    return blocks


def _kept_edges(graph: Graph, edge_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(src, rel, dst, indptr-as-numpy) of the kept edges, in CSR order."""
    if edge_mask is None:
        if "ref_indptr_np" not in graph._cache:
            graph._cache["ref_indptr_np"] = graph.indptr.cpu().numpy()
        return graph.src, graph.rel, graph.dst(), graph._cache["ref_indptr_np"]
    dst = graph.dst()[edge_mask]
    counts = torch.bincount(dst, minlength=graph.num_nodes).cpu().numpy()
    indptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return graph.src[edge_mask], graph.rel[edge_mask], dst, indptr


_SCRATCH: dict[tuple, Tensor] = {}


def _scratch(slot: int, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """A reusable uninitialised buffer of ``shape`` (grown on demand, one per slot/dtype/device).

    Fresh multi-megabyte tensors cost more in page faults than the gather itself; reusing a
    buffer makes ``index_select(out=...)`` and in-place ``mul_`` run at memory speed.
    """
    key = (slot, like.dtype, like.device)
    numel = 1
    for s in shape:
        numel *= s
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=like.dtype, device=like.device)
        _SCRATCH[key] = buf
    return buf[:numel].view(shape)


def clear_scratch() -> None:
    """Release the scratch buffers of the ``mul``/``sum`` fast path."""
    _SCRATCH.clear()


class _MulSum(torch.autograd.Function):
    """``out[v] = sum_{e -> v} x[src_e] * w[rel_e]``; x [N, B, d], w [R2, B or 1, d].

    Runs without autograd inside, so message pieces live in reusable scratch buffers.
    """

    @staticmethod
    def forward(ctx, x, w, src, rel, dst, blocks):  # noqa: ANN001, ANN205
        out = x.new_zeros(x.shape)
        _, batch, dim = x.shape
        for _r0, _r1, pieces in blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                msg = torch.index_select(
                    x, 0, src[e0:e1], out=_scratch(0, (e1 - e0, batch, dim), x)
                )
                wr = _scratch(1, (e1 - e0, w.shape[1], dim), x)
                msg.mul_(torch.index_select(w, 0, rel[e0:e1], out=wr))
                out.index_add_(0, dst[e0:e1], msg)
        ctx.save_for_backward(x, w, src, rel, dst)
        ctx.blocks = blocks
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        x, w, src, rel, dst = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad = grad.contiguous()
        _, batch, dim = x.shape
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.zeros_like(w) if need_w else None
        for _r0, _r1, pieces in ctx.blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                n = e1 - e0
                g = torch.index_select(grad, 0, dst[e0:e1], out=_scratch(0, (n, batch, dim), x))
                if need_w:  # d w[rel_e] += x[src_e] * g[dst_e]  (summed over B if w is shared)
                    t = torch.index_select(x, 0, src[e0:e1], out=_scratch(2, (n, batch, dim), x))
                    t.mul_(g)
                    gw.index_add_(0, rel[e0:e1], t.sum(1, keepdim=True) if w.shape[1] == 1 else t)
                if need_x:  # d x[src_e] += w[rel_e] * g[dst_e]
                    wr = torch.index_select(
                        w, 0, rel[e0:e1], out=_scratch(1, (n, w.shape[1], dim), x)
                    )
                    gx.index_add_(0, src[e0:e1], g.mul_(wr))
        return gx, gw, None, None, None, None


def _piece(
    x: Tensor,
    param: Tensor,
    src: Tensor,
    rel: Tensor,
    dst_local: Tensor,
    rows: int,
    message: str,
    aggregators: tuple[str, ...],
) -> tuple[Tensor, ...]:
    """Reductions over one piece of edges into ``rows`` rows: one [rows, B, d] per aggregator.

    ``param``: ``mul`` -> w [R2, B or 1, d]; ``basis`` -> W [R2, d, d] (already combined).
    """
    x_src = x.index_select(0, src)
    if message == "mul":
        msg = x_src * param.index_select(0, rel)
    else:  # m[e, b, i] = sum_j W[rel_e, i, j] x[src_e, b, j]
        msg = torch.bmm(x_src, param.index_select(0, rel).transpose(1, 2))
    outs = []
    for agg in aggregators:
        zeros = x.new_zeros(rows, x.shape[1], x.shape[2])
        if agg == "sum":
            outs.append(zeros.index_add(0, dst_local, msg))
        elif agg == "sumsq":
            outs.append(zeros.index_add(0, dst_local, msg * msg))
        else:
            index = dst_local.view(-1, 1, 1).expand_as(msg)
            reduce = "amax" if agg == "max" else "amin"
            outs.append(zeros.scatter_reduce(0, index, msg, reduce=reduce, include_self=False))
    return tuple(outs)


def _combine(agg: str, a: Tensor, b: Tensor) -> Tensor:
    if agg in ("sum", "sumsq"):
        return a + b
    return torch.maximum(a, b) if agg == "max" else torch.minimum(a, b)


def _blockwise(
    x: Tensor,
    param: Tensor,
    edges: tuple[Tensor, Tensor, Tensor],
    blocks: list[Block],
    message: str,
    aggregators: tuple[str, ...],
) -> dict[str, Tensor]:
    """Generic path: every piece under activation checkpointing when gradients are needed."""
    src, rel, dst = edges
    use_ckpt = torch.is_grad_enabled() and (x.requires_grad or param.requires_grad)
    parts: dict[str, list[Tensor]] = {a: [] for a in aggregators}
    for r0, r1, pieces in blocks:
        block: tuple[Tensor, ...] | None = None
        for e0, e1 in pieces:
            if e1 <= e0:
                continue
            args = (
                x,
                param,
                src[e0:e1],
                rel[e0:e1],
                dst[e0:e1] - r0,
                r1 - r0,
                message,
                aggregators,
            )
            res = checkpoint(_piece, *args, use_reentrant=False) if use_ckpt else _piece(*args)
            block = (
                res
                if block is None
                else tuple(
                    _combine(a, p, q) for a, p, q in zip(aggregators, block, res, strict=True)
                )
            )
        for i, agg in enumerate(aggregators):
            if block is None:
                parts[agg].append(x.new_zeros(r1 - r0, x.shape[1], x.shape[2]))
            else:
                parts[agg].append(block[i])
    return {a: torch.cat(parts[a], 0) if len(parts[a]) > 1 else parts[a][0] for a in aggregators}


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    *,
    message: str,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    chunk_elements: int = 1 << 24,
    **_: object,
) -> dict[str, Tensor]:
    """See :func:`cmpnn_dist.ops.propagate`."""
    num_nodes, batch, dim = x.shape
    src, rel, dst, indptr = _kept_edges(graph, edge_mask)
    budget = min(chunk_elements, CACHE_ELEMENTS) if x.device.type == "cpu" else chunk_elements
    max_edges = max(1, budget // max(1, batch * dim))
    key = ("ref_blocks", max_edges)
    if edge_mask is None and key in graph._cache:
        blocks = graph._cache[key]
    else:
        blocks = make_blocks(indptr, max_edges)
        if edge_mask is None:
            graph._cache[key] = blocks
    aggregators = tuple(aggregators)
    out: dict[str, Tensor] = {}
    if message == "mul":
        w = relation.unsqueeze(1) if relation.dim() == 2 else relation.transpose(0, 1)
        w = w.contiguous()
        x = x.contiguous()
        if "sum" in aggregators:
            out["sum"] = _MulSum.apply(x, w, src, rel, dst, blocks)
        if "sumsq" in aggregators:
            out["sumsq"] = _MulSum.apply(x * x, w * w, src, rel, dst, blocks)
        rest = tuple(a for a in aggregators if a in ("max", "min"))
        if rest:
            out.update(_blockwise(x, w, (src, rel, dst), blocks, message, rest))
    else:
        bases, coef = relation
        weights = torch.einsum("rk,kij->rij", coef, bases)
        out.update(
            _blockwise(x.contiguous(), weights, (src, rel, dst), blocks, message, aggregators)
        )
    out["degree"] = torch.bincount(dst, minlength=num_nodes).to(x.dtype)
    return {**{a: out[a] for a in aggregators}, "degree": out["degree"]}
