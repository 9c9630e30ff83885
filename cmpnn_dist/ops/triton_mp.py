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
Precision: the kernels accumulate in float32 (float64 for float64 inputs), and every partial
result that is combined afterwards -- the pieces of split hub rows, the relation segments --
stays in that dtype until the combined value is rounded once to the input dtype; a shared
MSG 2 relation's gradient is summed over the queries in it too.  So bfloat16 outputs and
gradients are the float32 computation rounded once.
``basis`` first computes the per-basis transforms ``y[n, k] = bases[k] x[n]`` in torch
([N, nb, B, d]); the kernels then gather ``y`` with the coefficient-weighted sum
``m_e = sum_k coef[r_e, k] y[s_e, k]`` (``y`` is rounded to the input dtype first).  The
edge orders and work items come from :mod:`cmpnn_dist.ops.triton_items`, built once per
graph and device and kept there.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops import triton_kernels as K  # before any triton import: sets the interpreter
from cmpnn_dist.ops.reductions import AGGREGATORS
from cmpnn_dist.ops.triton_items import (
    I32_MAX,
    MAX_EDGES,
    acc_dtype,
    combine_ext,
    combine_sum,
    kept_in_degree,
    partials,
    prepare,
)
from cmpnn_dist.ops.triton_tuning import launch as _launch

triton, tl = K.triton, K.tl


# ---------------------------------------------------------------- launches
def _acc(dtype: torch.dtype) -> object:
    """The kernels' accumulator type: :func:`acc_dtype` as a Triton type."""
    return tl.float64 if acc_dtype(dtype) == torch.float64 else tl.float32


def _permuted(keep: Tensor | None, order: Tensor, prep: dict) -> Tensor:
    """The keep mask in a backward edge order (``keep[order]``), so the kernels read it by
    position instead of through the edge id; an int32 placeholder when nothing is masked."""
    return prep["src"] if keep is None else keep[order]


def _relation_table(relation: Tensor, b: int) -> Tensor:
    """mul: relation [R2, d] (shared) or [B, R2, d] -> the [R2, C = B d] table laid out like a
    node row: ``w[r, b * d + j] = relation[b, r, j]``."""
    w = relation if relation.dim() == 3 else relation.unsqueeze(0)
    r2, d = w.shape[1:]
    return w.transpose(0, 1).expand(r2, b, d).reshape(r2, b * d).contiguous()


class _FusedPropagate(torch.autograd.Function):
    """tab [N, nb, C] (x or y), param (mul: relation [R2, d] / [B, R2, d]; basis: coef
    [R2, nb]) -> requested stats.  The mul relation table is built here, so its gradient is
    reduced over a shared relation's queries in float32 before the one rounding."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        tab: Tensor,
        param: Tensor,
        prep: dict,
        keep: Tensor | None,
        spec: dict,
    ) -> tuple[Tensor, ...]:
        n, nb, c = tab.shape
        w = param.contiguous() if spec["basis"] else _relation_table(param, c // param.shape[-1])
        ctx.param_shape = param.shape  # (w has param's dtype)
        it = prep["items"]
        want = spec["aggs"]
        # whole rows [n, C] in the input dtype; pieces of split rows apart, float32 / 64
        bufs = {a: tab.new_empty((n, c)) for a in want}
        parts = {a: partials(it, (c,), tab) for a in want}
        dummy = tab.new_empty(1)
        arg_shape = (it["slots"], c) if {"max", "min"} & set(want) else (1,)
        args_max = torch.empty(arg_shape, dtype=torch.int32, device=tab.device)
        args_min = torch.empty_like(args_max) if "min" in want else args_max
        args = [it["start"], it["end"], it["slot"], prep["src"], prep["rel"]]
        args += [keep if keep is not None else prep["src"], tab, w]
        args += [bufs.get(a, dummy) for a in AGGREGATORS] + [args_max, args_min]
        args += [parts.get(a, dummy) for a in AGGREGATORS] + [n, c]
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
                outs.append(combine_sum(bufs[a], parts[a], it))
            else:
                arg = args_max if a == "max" else args_min
                o, saved_args[a] = combine_ext(bufs[a], parts[a], arg, it, a == "max")
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
        any_grad = any(t is not None for t in grad.values())
        if need_tab:
            if any_grad:
                it = prep["t_items"]
                gtab, part = tab.new_empty((n, nb, c)), partials(it, (nb, c), tab)
                args = [it["row"], it["start"], it["end"], it["slot"], prep["src"]]
                args += [prep["t_dst"], prep["t_rel"], prep["t_eid"]]
                args += [_permuted(keep, prep["t_eid"], prep), *tail, gtab, part, n, c]
                _launch("bwd", it["num"], c, nb, args, dict(meta, REL_GRAD=False))
                gtab = combine_sum(gtab, part, it)
            else:
                gtab = torch.zeros_like(tab)
        if need_w:
            it = prep["r_items"]
            acc = acc_dtype(w.dtype)  # segments summed per relation before the one rounding
            gw_rows = torch.zeros((prep["r2"], nb, c), dtype=acc, device=w.device)
            if any_grad:
                part = torch.empty((it["slots"], nb, c), dtype=acc, device=w.device)
                args = [it["row"], it["start"], it["end"], it["slot"], prep["r_src"]]
                args += [prep["r_dst"], prep["rel"], prep["r_eid"]]
                args += [_permuted(keep, prep["r_eid"], prep), *tail, dummy, part, 0, c]
                _launch("bwd", it["num"], c, nb, args, dict(meta, REL_GRAD=True))
                gw_rows.index_add_(0, it["row64"], part)
            if spec["basis"]:  # coef [R2, nb]
                gw = gw_rows.sum(-1)
            else:  # [R2, C] -> [B, R2, d], summed over B where the relation is shared
                d = ctx.param_shape[-1]
                gw = gw_rows.view(prep["r2"], c // d, d).transpose(0, 1)
                if len(ctx.param_shape) == 2:
                    gw = gw.sum(0)
                elif ctx.param_shape[0] != gw.shape[0]:  # [1, R2, d] for B queries
                    gw = gw.sum(0, keepdim=True)
            gw = gw.to(w.dtype)
        return gtab, gw, None, None, None


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    *,
    message: str,
    aggregators: tuple[str, ...] | list[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    max_edges: int = MAX_EDGES,
    **kwargs: object,
) -> dict[str, Tensor]:
    """Fused Triton propagate; see the module docstring and docs/design.md "Ops".
    Per-edge float weights are not supported (``ops.propagate(impl="auto")`` then takes the
    reference path)."""
    if edge_weight is not None:
        raise ValueError("ops impl 'fused' does not support edge_weight; use impl='reference'")
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
        w = relation  # the [R2, C] table is built in _FusedPropagate
        shape = tuple(w.shape)
        if shape[-2:] != (r2, d) or not (w.dim() == 2 or (w.dim() == 3 and shape[0] in (1, b))):
            raise ValueError(f"relation must be [{r2}, {d}] or [{b}, {r2}, {d}]: {shape}")
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
        w = coef
        spec = dict(basis=True)
    else:
        raise ValueError(f"unknown message {message!r} (mul | basis)")
    spec.update(aggs=aggs, idx64=tab.numel() >= I32_MAX)
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
