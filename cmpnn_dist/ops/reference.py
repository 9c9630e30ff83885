"""Plain-torch message passing in destination-row blocks (the CPU training path).

Equations: see :mod:`cmpnn_dist.ops`.  The kept edges (edge_mask applied, CSR order kept) are
cut into *blocks* of consecutive destination rows ``[r0, r1)`` whose in-edges number at most
``max_edges`` (so that ``max_edges x B x d <= chunk_elements``); a block produces the rows
``r0:r1`` of every output.  A hub row with more in-edges than ``max_edges`` is its own block,
split into edge *pieces* of at most ``max_edges`` edges whose partial reductions are combined.

One custom autograd Function does the whole layer: forward computes each piece's messages
without autograd and reduces them at once; backward *recomputes* each piece's messages and
pushes the gradients through by hand:

    d m_e  = g_sum[v] + 2 m_e g_sumsq[v] + g_max[v] [m_e = max_v] / #ties + (same for min)
    mul:   d x[src_e] += d m_e * w[rel_e],      d w[rel_e] += d m_e * x[src_e]
    basis: d x[src_e] += W_{rel_e}^T d m_e,     d W_{rel_e} += d m_e x[src_e]^T

(``v = dst_e``; ties of max/min share the gradient evenly, as ``scatter_reduce`` does.)  So at
most one piece of messages (``<= chunk_elements`` entries) exists at a time, forward or
backward; per-piece work lives in reusable scratch buffers, since fresh multi-megabyte
tensors cost more in page faults than the gathers themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.naive import edge_scale

Block = tuple[int, int, list[tuple[int, int]]]  # rows [r0, r1), edge pieces [(e0, e1), ...]

# Pieces larger than this many message entries (4 MiB of float32) stop fitting in cache and
# run slower on CPU, so there the effective budget is min(chunk_elements, CACHE_ELEMENTS).
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


_SCRATCH: dict[tuple, Tensor] = {}


def _scratch(slot: int, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """An uninitialised buffer of ``shape`` for per-piece temporaries.

    On CPU it is reused across calls (one per thread, slot and dtype; grown on demand, at most
    ~``CACHE_ELEMENTS`` entries each); elsewhere the device's caching allocator already makes
    fresh tensors cheap, so a new one is returned.
    """
    if like.device.type != "cpu":
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    key = (threading.get_ident(), slot, like.dtype)
    numel = int(np.prod(shape))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=like.dtype)
        _SCRATCH[key] = buf
    return buf[:numel].view(shape)


def clear_scratch() -> None:
    """Release the CPU scratch buffers (a few MiB per slot and thread)."""
    _SCRATCH.clear()


def _gather(t: Tensor, index: Tensor, slot: int) -> Tensor:
    return torch.index_select(t, 0, index, out=_scratch(slot, (index.numel(), *t.shape[1:]), t))


def _messages(x: Tensor, param: Tensor, src: Tensor, rel: Tensor, basis: bool) -> Tensor:
    """Messages of one piece (no autograd), in scratch: [n, B, d].

    mul: ``x[src] * w[rel]`` (w [R2, B or 1, d]); basis: ``x[src] @ W[rel]^T`` (W [R2, d, d]).
    """
    xs = _gather(x, src, 0)
    if not basis:
        return xs.mul_(_gather(param, rel, 1))
    out = _scratch(2, xs.shape, x)
    return torch.bmm(xs, _gather(param, rel, 1).transpose(1, 2), out=out)


class _Propagate(torch.autograd.Function):
    """x, param, ew (kept edges' weights [E', B or 1, 1], or None) -> one output per aggregator."""

    @staticmethod
    def forward(ctx, x, param, ew, src, rel, dst, degree, blocks, basis, aggs):  # noqa: ANN001, ANN205
        outs = {}
        for a in aggs:
            fill = {"max": float("-inf"), "min": float("inf")}.get(a, 0.0)
            outs[a] = torch.full_like(x, fill)
        ties = {a: torch.zeros_like(x) for a in aggs if a in ("max", "min")}
        for _r0, _r1, pieces in blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                d, msg = dst[e0:e1], _messages(x, param, src[e0:e1], rel[e0:e1], basis)
                if ew is not None:
                    msg.mul_(ew[e0:e1])
                index = d.view(-1, 1, 1).expand_as(msg)
                for a in aggs:
                    if a == "sum":
                        outs[a].index_add_(0, d, msg)
                    elif a == "sumsq":
                        outs[a].index_add_(0, d, torch.mul(msg, msg, out=_scratch(3, msg.shape, x)))
                    else:
                        outs[a].scatter_reduce_(0, index, msg, "amax" if a == "max" else "amin")
            if ties:  # count the edges attaining the max / min of this block's (final) rows
                for e0, e1 in pieces:
                    if e1 <= e0:
                        continue
                    if len(pieces) > 1:  # hub block: recompute; else ``msg`` is this piece's
                        msg = _messages(x, param, src[e0:e1], rel[e0:e1], basis)
                        if ew is not None:
                            msg.mul_(ew[e0:e1])
                    d = dst[e0:e1]
                    for a, t in ties.items():
                        hit = _gather(outs[a], d, 3)
                        t.index_add_(0, d, torch.eq(msg, hit, out=hit))
        empty = (degree == 0).view(-1, 1, 1)
        for a in ("max", "min"):
            if a in outs:
                outs[a].masked_fill_(empty, 0.0)
        saved = [outs[a] for a in ties] + list(ties.values())
        ctx.save_for_backward(x, param, ew, src, rel, dst, *saved)
        ctx.blocks, ctx.basis, ctx.aggs, ctx.extremes = blocks, basis, aggs, tuple(ties)
        return tuple(outs[a] for a in aggs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):  # noqa: ANN001, ANN205
        x, param, ew, src, rel, dst, *rest = ctx.saved_tensors
        k = len(ctx.extremes)
        extreme = dict(zip(ctx.extremes, rest[:k], strict=True))
        ties = dict(zip(ctx.extremes, rest[k:], strict=True))
        g = {a: gr.contiguous() for a, gr in zip(ctx.aggs, grads, strict=True) if gr is not None}
        need_x, need_p, need_w = ctx.needs_input_grad[:3]
        gx = torch.zeros_like(x) if need_x else None
        gp = torch.zeros_like(param) if need_p else None
        gw = torch.zeros_like(ew) if need_w else None
        none7 = (None,) * 7
        if not g or not (need_x or need_p or need_w):
            return gx, gp, gw, *none7
        recompute = need_w or any(a in g for a in ("sumsq", "max", "min"))
        for _r0, _r1, pieces in ctx.blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                s, r, d = src[e0:e1], rel[e0:e1], dst[e0:e1]
                unweighted = msg = _messages(x, param, s, r, ctx.basis) if recompute else None
                if ew is not None and recompute:  # the messages the outputs were reduced from
                    msg = torch.mul(unweighted, ew[e0:e1], out=_scratch(8, unweighted.shape, x))
                if "sum" in g:
                    gm = _gather(g["sum"], d, 4)
                else:
                    gm = _scratch(4, (e1 - e0, *x.shape[1:]), x).zero_()
                if "sumsq" in g:
                    gm.addcmul_(_gather(g["sumsq"], d, 5), msg, value=2.0)
                for a in ("max", "min"):
                    if a in g:
                        hit = torch.eq(
                            msg, _gather(extreme[a], d, 5), out=_scratch(6, msg.shape, x)
                        )
                        hit.div_(_gather(ties[a], d, 5)).mul_(_gather(g[a], d, 5))
                        gm.add_(hit)
                if ew is not None:  # gm = dL/d(w m); dL/dw = <gm, m>, dL/dm = w gm
                    if need_w:
                        t = torch.mul(gm, unweighted, out=_scratch(7, gm.shape, x)).sum(-1, True)
                        gw[e0:e1] = t.sum(1, keepdim=True) if ew.shape[1] == 1 else t
                    gm.mul_(ew[e0:e1])
                xs = _gather(x, s, 0)
                prm = _gather(param, r, 1)
                if need_p:
                    if ctx.basis:  # dW_e = gm_e^T xs_e  [n, d, d]
                        gp.index_add_(0, r, torch.bmm(gm.transpose(1, 2), xs))
                    else:
                        t = torch.mul(gm, xs, out=_scratch(7, gm.shape, x))
                        gp.index_add_(0, r, t.sum(1, keepdim=True) if param.shape[1] == 1 else t)
                if need_x:
                    gxs = torch.bmm(gm, prm, out=xs) if ctx.basis else gm.mul_(prm)
                    gx.index_add_(0, s, gxs)
        return gx, gp, gw, *none7


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


_HALF = (torch.bfloat16, torch.float16)


def _basis_weights(bases: Tensor, coef: Tensor) -> Tensor:
    """W = einsum(coef, bases) [R2, d, d]; skipped when coef is a fixed identity (full W_r)."""
    r2, nb = coef.shape
    if r2 == nb and not coef.requires_grad and torch.equal(coef, torch.eye(r2).to(coef)):
        return bases
    return torch.einsum("rk,kij->rij", coef, bases)


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    *,
    message: str,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    chunk_elements: int = 1 << 24,
    **_: object,
) -> dict[str, Tensor]:
    """See :func:`cmpnn_dist.ops.propagate`.  bfloat16 / float16 inputs are computed in
    float32 and the results cast back (float32 accumulation, as the fused kernels do: summed
    in 16 bits, a hub's thousands of terms lose whole percents)."""
    if x.dtype in _HALF:
        rel32 = tuple(t.float() for t in relation) if message == "basis" else relation.float()
        w32 = edge_weight.float() if edge_weight is not None else None
        out = propagate(graph, x.float(), rel32, message=message, aggregators=aggregators,
                        edge_mask=edge_mask, edge_weight=w32,
                        chunk_elements=chunk_elements)  # fmt: skip
        return {k: v.to(x.dtype) for k, v in out.items()}
    num_nodes, batch, dim = x.shape
    basis = message == "basis"
    src, rel, dst, indptr = _kept_edges(graph, edge_mask)
    budget = min(chunk_elements, CACHE_ELEMENTS) if x.device.type == "cpu" else chunk_elements
    per_edge = batch * dim + (dim * dim if basis else 0)  # messages (+ gathered W_r)
    max_edges = max(1, budget // per_edge)
    key = ("ref_blocks", max_edges)
    if edge_mask is None and key in graph._cache:
        blocks = graph._cache[key]
    else:
        blocks = make_blocks(indptr, max_edges)
        if edge_mask is None:
            graph._cache[key] = blocks
    if basis:
        param = _basis_weights(*relation)
    else:
        param = relation.unsqueeze(1) if relation.dim() == 2 else relation.transpose(0, 1)
    degree = torch.bincount(dst, minlength=num_nodes).to(x.dtype)
    aggs = tuple(dict.fromkeys(aggregators))
    if not aggs:
        return {"degree": degree}
    ew = None
    if edge_weight is not None:
        ew = edge_scale(edge_weight.to(x.dtype), edge_mask).contiguous()
    outs = _Propagate.apply(
        x.contiguous(), param.contiguous(), ew, src, rel, dst, degree, blocks, basis, aggs
    )
    return {**dict(zip(aggs, outs, strict=True)), "degree": degree}
