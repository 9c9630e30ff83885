"""Fused relational message passing with Triton (``ops.impl=fused``).

``propagate(graph, x, relation, *, message, aggregators, edge_mask=None)`` has the semantics of
docs/design.md "Ops" (x [N, B, d]; ``mul`` with relation [R2, d] or [B, R2, d]; ``basis`` with
``(bases [nb, d, d], coef [R2, nb])``; aggregators from sum / sumsq / max / min, plus
``degree`` [N]; nodes without kept in-edges get 0).

Forward: one pass over the destination-sorted CSR computing every requested statistic
(:func:`cmpnn_dist.ops.triton_kernels.fwd_kernel`); max / min also store the arg edge id.
Backward (all statistics in one kernel per gradient): the input gradient runs over the
source-sorted (transposed) CSR and the relation gradient over single-relation edge segments
(edges sorted by relation, each relation cut into segments of at most ``max_edges``), both
reductions without atomics; the per-segment partials [segments, C] are then summed per
relation with ``index_add_`` on that small tensor; an edge mask is permuted into each
backward order first, so the kernels read it by position.  Max / min gradients flow only
through the edge whose id equals the stored arg of its destination (tested per edge in the
same kernels): among exactly tied edges that is the smallest edge id, where the other
implementations share the gradient evenly (see :mod:`cmpnn_dist.ops`).
``basis`` first computes the per-basis transforms ``y[n, k] = bases[k] x[n]`` in torch
([N, nb, B, d]); the kernels then gather ``y`` with the coefficient-weighted sum
``m_e = sum_k coef[r_e, k] y[s_e, k]``.  The transposed / relation-sorted edge orders and the
work items are built once per graph and device and cached in ``graph._cache``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops import triton_kernels as K  # before any triton import: sets the interpreter
from cmpnn_dist.ops.triton_tuning import launch as _launch

triton, tl = K.triton, K.tl

AGGREGATORS = ("sum", "sumsq", "max", "min")
MAX_EDGES = 1024  # longest edge range one program walks (hub rows are split)
_I32_MAX = 2**31 - 1


# ---------------------------------------------------------------- graph-side preparation
def _items(indptr: Tensor, max_edges: int, own_slots: bool = False) -> dict:
    """Work items over a CSR: rows longer than ``max_edges`` are cut into several items.

    Returns int32 ``row, start, end, slot`` [I] and int64 ``extra_rows`` [P]: item slots are
    the row itself for unsplit rows, ``n + i`` for the i-th piece of a split row (combined into
    ``extra_rows[i]`` afterwards).  ``own_slots``: every item writes slot = its item index.
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
    return {
        "row": row.to(i32),
        "start": start.to(i32),
        "end": end.to(i32),
        "slot": slot.to(i32),
        "n": n,
        "extra_rows": extra,
        "extra_unique": torch.unique(extra),
        "num": int(row.numel()),
        "slots": n + int(extra.numel()) if not own_slots else int(row.numel()),
    }


def prepare(graph: Graph, device: torch.device, max_edges: int = MAX_EDGES) -> dict:
    """int32 edge arrays in dst / src / relation order and their work items (cached on graph)."""
    key = ("triton_mp", str(device), max_edges)
    if key in graph._cache:
        return graph._cache[key]
    if graph.num_edges >= _I32_MAX:
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
        "src64": src,
        "rel64": rel,
        "indptr": indptr,
        "in_degree": indptr.diff(),
        "items": _items(indptr, max_edges),
        "t_dst": dst[perm].to(i32),
        "t_rel": rel[perm].to(i32),
        "t_eid": perm.to(i32),
        "t_items": _items(t_indptr, max_edges),
        "r_src": src[rperm].to(i32),
        "r_dst": dst[rperm].to(i32),
        "r_eid": rperm.to(i32),
        "r_items": _items(r_indptr, max_edges, own_slots=True),
    }
    graph._cache[key] = prep
    return prep


# ---------------------------------------------------------------- launches
def _acc(dtype: torch.dtype) -> object:
    return tl.float64 if dtype == torch.float64 else tl.float32


def _combine_sum(buf: Tensor, items: dict) -> Tensor:
    """Add the partial slots (rows >= n) of ``buf`` [S, ...] into their rows; returns buf[:n]."""
    n = items["n"]
    out = buf[:n]
    if items["extra_rows"].numel():
        out.index_fill_(0, items["extra_unique"], 0)  # (not `out[idx] = 0`: a host copy)
        out.index_add_(0, items["extra_rows"], buf[n:])
    return out


def _combine_ext(buf: Tensor, arg: Tensor, items: dict, largest: bool) -> tuple[Tensor, Tensor]:
    """Max / min of the partial slots with the smallest arg edge id among ties."""
    n = items["n"]
    out, aout = buf[:n], arg[:n]
    if not items["extra_rows"].numel():
        return out, aout
    rows, uniq = items["extra_rows"], items["extra_unique"]
    fill = float("-inf") if largest else float("inf")
    part, parg = buf[n:], arg[n:]
    pv = torch.where(parg >= 0, part, torch.full_like(part, fill))
    idx = rows[:, None].expand_as(pv)
    out.index_fill_(0, uniq, fill)
    out.scatter_reduce_(0, idx, pv, "amax" if largest else "amin")
    cand = torch.where((pv == out[rows]) & (parg >= 0), parg, torch.full_like(parg, _I32_MAX))
    aout.index_fill_(0, uniq, _I32_MAX)
    aout.scatter_reduce_(0, idx, cand, "amin")
    none = aout[uniq] == _I32_MAX
    out[uniq] = torch.where(none, torch.zeros_like(out[uniq]), out[uniq])
    aout[uniq] = torch.where(none, torch.full_like(aout[uniq], -1), aout[uniq])
    return out, aout


def _permuted(keep: Tensor | None, order: Tensor, prep: dict) -> Tensor:
    """The keep mask in a backward edge order (``keep[order]``), so the kernels read it by
    position instead of through the edge id; an int32 placeholder when nothing is masked."""
    return prep["src"] if keep is None else keep[order]


class _FusedPropagate(torch.autograd.Function):
    """tab [N, nb, C] (x or y), w ([R2, C] relation table or [R2, nb] coef) -> requested stats."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        tab: Tensor,
        w: Tensor,
        prep: dict,
        keep: Tensor | None,
        spec: dict,
    ) -> tuple[Tensor, ...]:
        n, nb, c = tab.shape
        it = prep["items"]
        want = spec["aggs"]
        bufs = {a: tab.new_empty((it["slots"], c)) for a in want}
        dummy = tab.new_empty(1)
        arg_shape = (it["slots"], c) if {"max", "min"} & set(want) else (1,)
        args_max = torch.empty(arg_shape, dtype=torch.int32, device=tab.device)
        args_min = torch.empty_like(args_max) if "min" in want else args_max
        args = [it["start"], it["end"], it["slot"], prep["src"], prep["rel"]]
        args += [keep if keep is not None else prep["src"], tab, w]
        args += [bufs.get(a, dummy) for a in AGGREGATORS] + [args_max, args_min]
        args += [c]
        meta = dict(
            NB=nb,
            BASIS=spec["basis"],
            HAS_MASK=keep is not None,
            DO_SUM="sum" in want,
            DO_SQ="sumsq" in want,
            DO_MAX="max" in want,
            DO_MIN="min" in want,
            IDX64=spec["idx64"],
            ACC=_acc(tab.dtype),
        )
        _launch("fwd", it["num"], c, 1, args, meta)
        outs, saved_args = [], {}
        for a in want:
            if a in ("sum", "sumsq"):
                outs.append(_combine_sum(bufs[a], it))
            else:
                arg = args_max if a == "max" else args_min
                o, saved_args[a] = _combine_ext(bufs[a], arg, it, a == "max")
                outs.append(o)
        ctx.prep, ctx.keep, ctx.spec = prep, keep, spec
        ctx.arg_aggs = list(saved_args)
        ctx.save_for_backward(tab, w, *saved_args.values())  # arg edge ids [N, C] int32
        ctx.set_materialize_grads(False)
        return tuple(outs)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, *grads: Tensor | None) -> tuple:
        tab, w, *saved = ctx.saved_tensors
        prep, keep, spec = ctx.prep, ctx.keep, ctx.spec
        g = dict(zip(spec["aggs"], grads, strict=True))
        n, nb, c = tab.shape
        gtab = gw = None
        need_tab, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad = {a: (t.contiguous() if t is not None else None) for a, t in g.items()}
        args_of = dict(zip(ctx.arg_aggs, saved, strict=True))
        dummy = tab.new_empty(1)
        idummy = torch.empty(1, dtype=torch.int32, device=tab.device)
        meta = dict(
            NB=nb,
            BASIS=spec["basis"],
            HAS_MASK=keep is not None,
            HAS_GS=grad.get("sum") is not None,
            HAS_GQ=grad.get("sumsq") is not None,
            HAS_GMAX=grad.get("max") is not None,
            HAS_GMIN=grad.get("min") is not None,
            IDX64=spec["idx64"],
            ACC=_acc(tab.dtype),
        )
        tail = [tab, w]
        tail += [grad.get(a) if grad.get(a) is not None else dummy for a in ("sum", "sumsq")]
        for a in ("max", "min"):
            tail += [args_of.get(a, idummy), grad.get(a) if grad.get(a) is not None else dummy]
        dims = [c]
        any_grad = any(t is not None for t in grad.values())
        if need_tab:
            if any_grad:
                it = prep["t_items"]
                buf = tab.new_empty((it["slots"], nb, c))
                args = [it["row"], it["start"], it["end"], it["slot"], prep["src"]]
                args += [prep["t_dst"], prep["t_rel"], prep["t_eid"]]
                args += [_permuted(keep, prep["t_eid"], prep), *tail, buf, *dims]
                _launch("bwd", it["num"], c, nb, args, dict(meta, REL_GRAD=False))
                gtab = _combine_sum(buf, it)
            else:
                gtab = torch.zeros_like(tab)
        if need_w:
            it = prep["r_items"]
            gw_rows = torch.zeros((prep["r2"], nb, c), dtype=w.dtype, device=w.device)
            if any_grad:
                part = tab.new_empty((it["slots"], nb, c), dtype=w.dtype)
                args = [it["row"], it["start"], it["end"], it["slot"], prep["r_src"]]
                args += [prep["r_dst"], prep["rel"], prep["r_eid"]]
                args += [_permuted(keep, prep["r_eid"], prep), *tail, part, *dims]
                _launch("bwd", it["num"], c, nb, args, dict(meta, REL_GRAD=True))
                gw_rows.index_add_(0, it["row"].long(), part)
            # basis: coef [R2, nb]; mul: the [R2, C] relation table
            gw = gw_rows.sum(-1) if spec["basis"] else gw_rows.view(prep["r2"], c)
        return gtab, gw, None, None, None


def kept_in_degree(indptr: Tensor, edge_mask: Tensor) -> Tensor:
    """int64 [N]: number of in-edges per node that ``edge_mask`` keeps (dst-sorted CSR)."""
    cs = torch.zeros(edge_mask.numel() + 1, dtype=torch.long, device=edge_mask.device)
    cs[1:] = torch.cumsum(edge_mask.long(), 0)
    return cs[indptr[1:]] - cs[indptr[:-1]]


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    *,
    message: str,
    aggregators: tuple[str, ...] | list[str],
    edge_mask: Tensor | None = None,
    max_edges: int = MAX_EDGES,
    **kwargs: object,
) -> dict[str, Tensor]:
    """Fused Triton propagate; see the module docstring and docs/design.md "Ops"."""
    aggs = tuple(dict.fromkeys(aggregators))
    bad = [a for a in aggs if a not in AGGREGATORS]
    if bad:
        raise ValueError(f"unknown aggregators {bad}; expected a subset of {AGGREGATORS}")
    if x.dim() != 3 or x.shape[0] != graph.num_nodes:
        raise ValueError(f"x must be [N={graph.num_nodes}, B, d], got {tuple(x.shape)}")
    n, b, d = x.shape
    prep = prepare(graph, x.device, max_edges)
    r2 = graph.num_relations
    if message == "mul":
        w = relation
        if w.dim() == 2:
            w = w.unsqueeze(0)
        if w.dim() != 3 or w.shape[1:] != (r2, d) or w.shape[0] not in (1, b):
            raise ValueError(f"relation must be [{r2}, {d}] or [{b}, {r2}, {d}]: {tuple(w.shape)}")
        # [R2, C] table laid out like a node row: w[r, b * d + j] = relation[b, r, j]
        w = w.transpose(0, 1).expand(r2, b, d).reshape(r2, b * d).contiguous()
        tab = x.reshape(n, 1, b * d).contiguous()
        spec = dict(basis=False)
    elif message == "basis":
        bases, coef = relation
        nb = bases.shape[0]
        if bases.shape != (nb, d, d) or coef.shape != (r2, nb):
            raise ValueError(
                f"basis relation must be (bases [nb, {d}, {d}], coef [{r2}, nb]): "
                f"{tuple(bases.shape)}, {tuple(coef.shape)}"
            )
        # y[n, k, b, j] = sum_i bases[k, j, i] x[n, b, i]
        tab = torch.einsum("nbi,kji->nkbj", x, bases.to(x.dtype)).reshape(n, nb, b * d)
        w = coef.contiguous()
        spec = dict(basis=True)
    else:
        raise ValueError(f"unknown message {message!r} (mul | basis)")
    spec.update(aggs=aggs, idx64=tab.numel() >= _I32_MAX)
    keep = None
    if edge_mask is not None:
        if edge_mask.shape != (graph.num_edges,):
            raise ValueError(f"edge_mask must be bool [{graph.num_edges}]")
        keep = edge_mask.to(device=x.device, dtype=torch.uint8).contiguous()
    out: dict[str, Tensor] = {}
    if aggs:
        res = _FusedPropagate.apply(tab, w, prep, keep, spec)
        out = {a: t.view(n, b, d) for a, t in zip(aggs, res, strict=True)}
    deg = prep["in_degree"] if keep is None else kept_in_degree(prep["indptr"], keep)
    out["degree"] = deg.to(x.dtype)
    return out
