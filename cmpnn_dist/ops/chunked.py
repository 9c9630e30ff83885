"""Chunked gather-then-reduce over destination-row blocks: the engine of ``reference`` and
``generic``.

Equations: see :mod:`cmpnn_dist.ops`.  The kept edges (edge_mask applied, CSR order kept) are
cut into *blocks* of consecutive destination rows ``[r0, r1)`` whose in-edges number at most
``max_edges`` (so that ``max_edges x B x d <= chunk_elements``); a block produces the rows
``r0:r1`` of every output.  A hub row with more in-edges than ``max_edges`` is its own block,
split into edge *pieces* of at most ``max_edges`` edges whose partial reductions are combined.

One custom autograd Function does the whole layer: forward computes each piece's messages
without autograd and reduces them at once; backward *recomputes* each piece's messages and
pushes the gradients through:

    d m_e  = g_sum[v] + 2 m_e g_sumsq[v] + g_max[v] [m_e = max_v] / #ties + (same for min)
    weighted (m_e = w_e u_e):  d w_e = <d m_e, u_e>,   d u_e = w_e d m_e

(``v = dst_e``; ties of max/min share the gradient evenly, as ``scatter_reduce`` does), then
hands ``d u_e`` of the piece to a :class:`Kernel`, which owns the message function: it computes
a piece's messages and accumulates their gradient into ``x`` and the relation parameters
(by hand in ``reference``'s fast kernels, by autograd through the message function in
``generic``).  So at most one piece of messages (``<= chunk_elements`` entries) exists at a
time, forward or backward; per-piece work lives in reusable scratch buffers on CPU, since fresh
multi-megabyte tensors cost more in page faults than the gathers themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from cmpnn_dist.graph import Graph, PerGraph
from cmpnn_dist.ops.naive import edge_scale

Block = tuple[int, int, list[tuple[int, int]]]  # rows [r0, r1), edge pieces [(e0, e1), ...]

# Pieces larger than this many message entries (4 MiB of float32) stop fitting in cache and
# run slower on CPU, so there the effective budget is min(chunk_elements, CACHE_ELEMENTS).
CACHE_ELEMENTS = 1 << 20
HALF = (torch.bfloat16, torch.float16)


_BLOCKS: PerGraph[int, list[Block]] = PerGraph()  # each graph's blocks by max_edges


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


def scratch(slot: int, shape: tuple[int, ...], like: Tensor) -> Tensor:
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


def gather(t: Tensor, index: Tensor, slot: int) -> Tensor:
    """``t[index]`` into scratch ``slot``."""
    return torch.index_select(t, 0, index, out=scratch(slot, (index.numel(), *t.shape[1:]), t))


class Kernel:
    """How one piece's messages are computed and differentiated.

    ``messages`` runs without autograd and returns [n, B, d] (scratch slots 0-2 may be used;
    ``in_place`` says the result may be modified in place).  ``recompute`` is the backward's
    version: it may also return a state for ``backward``.  ``backward`` accumulates the
    gradient ``gm`` [n, B, d] of the piece's messages (it may overwrite ``gm``) into ``gx``
    and ``gparams`` (entries None where no gradient is needed; slots 0-2 and 7 are free).
    """

    extra_per_edge = 0  # scratch entries per edge beyond the messages (counts in the budget)
    in_place = True

    def messages(self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor) -> Tensor:
        raise NotImplementedError

    def recompute(
        self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor
    ) -> tuple[Tensor, object]:
        return self.messages(x, params, src, rel), None

    def backward(
        self,
        x: Tensor,
        params: tuple[Tensor, ...],
        src: Tensor,
        rel: Tensor,
        gm: Tensor,
        state: object,
        gx: Tensor | None,
        gparams: list[Tensor | None],
    ) -> None:
        raise NotImplementedError


class _Propagate(torch.autograd.Function):
    """x, ew (kept edges' weights [E', B or 1, 1] or None), *params -> one output per
    aggregator."""

    @staticmethod
    def forward(ctx, x, ew, src, rel, dst, degree, blocks, kernel, aggs, *params):  # noqa: ANN001, ANN205
        outs = {}
        for a in aggs:
            fill = {"max": float("-inf"), "min": float("inf")}.get(a, 0.0)
            outs[a] = torch.full_like(x, fill)
        ties = {a: torch.zeros_like(x) for a in aggs if a in ("max", "min")}

        def piece(e0: int, e1: int) -> Tensor:
            msg = kernel.messages(x, params, src[e0:e1], rel[e0:e1])
            if ew is None:
                return msg
            return msg.mul_(ew[e0:e1]) if kernel.in_place else msg * ew[e0:e1]

        for _r0, _r1, pieces in blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                d, msg = dst[e0:e1], piece(e0, e1)
                index = d.view(-1, 1, 1).expand_as(msg)
                for a in aggs:
                    if a == "sum":
                        outs[a].index_add_(0, d, msg)
                    elif a == "sumsq":
                        outs[a].index_add_(0, d, torch.mul(msg, msg, out=scratch(3, msg.shape, x)))
                    else:
                        outs[a].scatter_reduce_(0, index, msg, "amax" if a == "max" else "amin")
            if ties:  # count the edges attaining the max / min of this block's (final) rows
                for e0, e1 in pieces:
                    if e1 <= e0:
                        continue
                    if len(pieces) > 1:  # hub block: recompute; else ``msg`` is this piece's
                        msg = piece(e0, e1)
                    d = dst[e0:e1]
                    for a, t in ties.items():
                        hit = gather(outs[a], d, 3)
                        t.index_add_(0, d, torch.eq(msg, hit, out=hit))
        empty = (degree == 0).view(-1, 1, 1)
        for a in ("max", "min"):
            if a in outs:
                outs[a].masked_fill_(empty, 0.0)
        saved = [outs[a] for a in ties] + list(ties.values())
        ctx.save_for_backward(x, ew, src, rel, dst, *params, *saved)
        ctx.blocks, ctx.kernel, ctx.aggs, ctx.extremes = blocks, kernel, aggs, tuple(ties)
        ctx.num_params = len(params)
        return tuple(outs[a] for a in aggs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):  # noqa: ANN001, ANN205
        x, ew, src, rel, dst, *rest = ctx.saved_tensors
        params, rest = tuple(rest[: ctx.num_params]), rest[ctx.num_params :]
        k = len(ctx.extremes)
        extreme = dict(zip(ctx.extremes, rest[:k], strict=True))
        ties = dict(zip(ctx.extremes, rest[k:], strict=True))
        g = {a: gr.contiguous() for a, gr in zip(ctx.aggs, grads, strict=True) if gr is not None}
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_p = ctx.needs_input_grad[9:]
        gx = torch.zeros_like(x) if need_x else None
        gw = torch.zeros_like(ew) if need_w else None
        gparams = [torch.zeros_like(p) if n else None for p, n in zip(params, need_p, strict=True)]
        none7 = (None,) * 7
        if not g or not (need_x or need_w or any(need_p)):
            return gx, gw, *none7, *gparams
        kernel = ctx.kernel
        recompute = need_w or any(a in g for a in ("sumsq", "max", "min"))
        for _r0, _r1, pieces in ctx.blocks:
            for e0, e1 in pieces:
                if e1 <= e0:
                    continue
                s, r, d = src[e0:e1], rel[e0:e1], dst[e0:e1]
                unweighted = msg = state = None
                if recompute:
                    unweighted, state = kernel.recompute(x, params, s, r)
                    msg = unweighted
                    if ew is not None:  # the messages the outputs were reduced from
                        msg = torch.mul(unweighted, ew[e0:e1], out=scratch(8, msg.shape, x))
                if "sum" in g:
                    gm = gather(g["sum"], d, 4)
                else:
                    gm = scratch(4, (e1 - e0, *x.shape[1:]), x).zero_()
                if "sumsq" in g:
                    gm.addcmul_(gather(g["sumsq"], d, 5), msg, value=2.0)
                for a in ("max", "min"):
                    if a in g:
                        hit = torch.eq(msg, gather(extreme[a], d, 5), out=scratch(6, msg.shape, x))
                        hit.div_(gather(ties[a], d, 5)).mul_(gather(g[a], d, 5))
                        gm.add_(hit)
                if ew is not None:  # gm = dL/d(w u); dL/dw = <gm, u>, dL/du = w gm
                    if need_w:
                        t = torch.mul(gm, unweighted, out=scratch(7, gm.shape, x)).sum(-1, True)
                        gw[e0:e1] = t.sum(1, keepdim=True) if ew.shape[1] == 1 else t
                    gm.mul_(ew[e0:e1])
                if need_x or any(need_p):
                    kernel.backward(x, params, s, r, gm, state, gx, gparams)
        return gx, gw, *none7, *gparams


def _kept_edges(graph: Graph, edge_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(src, rel, dst, indptr-as-numpy) of the kept edges, in CSR order."""
    if edge_mask is None:
        return graph.src, graph.rel, graph.dst(), graph.indptr_numpy()
    dst = graph.dst()[edge_mask]
    counts = torch.bincount(dst, minlength=graph.num_nodes).cpu().numpy()
    indptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return graph.src[edge_mask], graph.rel[edge_mask], dst, indptr


def in_float32(
    propagate: Callable[..., dict[str, Tensor]],
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    **kwargs: object,
) -> dict[str, Tensor]:
    """``propagate`` on bfloat16 / float16 inputs: computed in float32 (relation parameters
    and weights too), the outputs cast back once (float32 accumulation, as the fused kernels
    do: summed in 16 bits, a hub's thousands of terms lose whole percents)."""
    rel32 = tuple(t.float() for t in relation) if isinstance(relation, tuple | list) else None
    rel32 = rel32 if rel32 is not None else relation.float()
    weight = kwargs.get("edge_weight")
    if weight is not None:
        kwargs["edge_weight"] = weight.float()
    out = propagate(graph, x.float(), rel32, **kwargs)
    return {k: v.to(x.dtype) for k, v in out.items()}


def run(
    graph: Graph,
    x: Tensor,
    params: Sequence[Tensor],
    kernel: Kernel,
    aggregators: Sequence[str],
    edge_mask: Tensor | None,
    edge_weight: Tensor | None,
    chunk_elements: int,
) -> dict[str, Tensor]:
    """Blocks, degree and the autograd Function for one call; ``params`` in the kernel's
    layout, x float32 or float64 (see :func:`in_float32`)."""
    num_nodes, batch, dim = x.shape
    src, rel, dst, indptr = _kept_edges(graph, edge_mask)
    budget = min(chunk_elements, CACHE_ELEMENTS) if x.device.type == "cpu" else chunk_elements
    max_edges = max(1, budget // (batch * dim + kernel.extra_per_edge))
    if edge_mask is None:
        blocks = _BLOCKS.get(graph, max_edges, lambda: make_blocks(indptr, max_edges))
    else:
        blocks = make_blocks(indptr, max_edges)
    degree = torch.bincount(dst, minlength=num_nodes).to(x.dtype)
    aggs = tuple(dict.fromkeys(aggregators))
    if not aggs:
        return {"degree": degree}
    ew = None
    if edge_weight is not None:
        ew = edge_scale(edge_weight.to(x.dtype), edge_mask).contiguous()
    params = [p.contiguous() for p in params]
    x = x.contiguous()
    outs = _Propagate.apply(x, ew, src, rel, dst, degree, blocks, kernel, aggs, *params)
    return {**dict(zip(aggs, outs, strict=True)), "degree": degree}
