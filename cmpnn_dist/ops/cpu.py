"""Compiled CPU message passing for ``message="mul"`` (``impl=cpu``): gather-reduce, no scratch.

Equations: see :mod:`cmpnn_dist.ops`; here ``m_e[b] = x[src_e, b] * w[rel_e, b or 0] (* ew_e)``
with ``x`` float [N, B, d], the relation table ``w`` [R2, d] (shared) or [B, R2, d] (per
query), optional ``edge_weight`` [E] or [B, E] and ``edge_mask`` bool [E].

Forward (``cpu_kernel.cpp``): for each destination row of the CSR (rows split over torch's
OpenMP threads in ranges of about equal edge counts), gather each kept in-edge's source row
``x[src_e]`` (B x d), multiply by ``w[rel_e]`` (and the weight) on the fly and reduce into
per-row accumulators (sum, sumsq, max, min and the position of the in-edge attaining max /
min: int16 when every in-degree is below 2^15, else int32); each output row is written once.
Backward: for each *source* row of a transposed copy of the graph (source-sorted edge ids,
destinations, relations and in-edge positions, int32: :func:`transposed`), gather
``g_sum[dst_e]`` (and ``g_sumsq``, ``g_max`` / ``g_min`` where the recorded position is
``e``'s), reduce ``d x[s] = sum_e ew_e gm_e * w[rel_e]`` in registers and
write it once; ``d w`` is reduced over fixed groups of source rows (their number depends
on the graph and shapes, not on the thread count), ``d ew_e = <gm_e, u_e>`` written per edge.

Gradients of max / min go to the first edge attaining the extreme (smallest edge id), as
``fused`` does.  bfloat16 / float16 inputs are read as such and computed in float32; outputs
and gradients are of the input dtype.  Messages other than ``mul`` are not covered (the
dispatcher's ``auto`` sends them to ``reference`` / ``generic``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph, PerGraph
from cmpnn_dist.ops import cpu_build
from cmpnn_dist.ops.messages import EdgeMessage, as_params, get_message

EXTREMES = ("max", "min")


Transposed = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]
_TRANSPOSED: PerGraph[None, Transposed] = PerGraph()  # the backward's layout of each graph


def transposed(graph: Graph) -> Transposed:
    """Source-sorted copy of ``graph``: (indptr int64 [N+1], edge id, dst, rel, position of the
    edge among its destination's in-edges: int32 [E]); built once per graph (stable sort: a
    source's edges stay in edge-id order, as :meth:`Graph.out_index`, which is int64 and not
    kept for the dense model)."""

    def build() -> Transposed:
        order = torch.argsort(graph.src, stable=True)
        counts = torch.bincount(graph.src, minlength=graph.num_nodes)
        indptr = torch.zeros(graph.num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        dst = graph.dst()[order]
        return (
            indptr,
            order.to(torch.int32),
            dst.to(torch.int32),
            graph.rel[order].to(torch.int32),
            (order - graph.indptr[dst]).to(torch.int32),
        )

    return _TRANSPOSED.get(graph, None, build)


def short_positions(graph: Graph) -> bool:
    """Whether max / min record their in-edge positions as int16 (every in-degree < 2^15)."""
    return graph.max_in_degree() < 2**15 - 1


class _MulPropagate(torch.autograd.Function):
    """(x [N,B,d], w [R2,1|B,d], ew [E,1|B] or None) -> one output per aggregator, degree."""

    @staticmethod
    def forward(ctx, x, w, ew, graph, mask, aggs, need_arg):  # noqa: ANN001, ANN205
        sum_, sq, mx, mn, amax, amin, degree = torch.ops.cmpnn_cpu.forward(
            x, w, ew, mask, graph.indptr, graph.src, graph.rel,
            "sum" in aggs, "sumsq" in aggs, "max" in aggs, "min" in aggs, need_arg,
            short_positions(graph),
        )  # fmt: skip
        ctx.save_for_backward(x, w, ew, mask, amax, amin)
        ctx.graph, ctx.aggs = graph, aggs
        ctx.mark_non_differentiable(degree)
        named = {"sum": sum_, "sumsq": sq, "max": mx, "min": mn}
        return (*(named[a] for a in aggs), degree)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):  # noqa: ANN001, ANN205
        x, w, ew, mask, amax, amin = ctx.saved_tensors
        need_x, need_w, need_ew = ctx.needs_input_grad[:3]
        none4 = (None, None, None, None)  # graph, mask, aggs, need_arg
        g = {a: gr for a, gr in zip(ctx.aggs, grads, strict=False) if gr is not None}
        if not g or not (need_x or need_w or need_ew):
            return None, None, None, *none4
        g = {a: t.to(x.dtype).contiguous() for a, t in g.items()}
        gx, gw, gew = torch.ops.cmpnn_cpu.backward(
            x, w, ew, mask, ctx.graph.indptr, *transposed(ctx.graph),
            g.get("sum"), g.get("sumsq"), g.get("max"), g.get("min"), amax, amin,
            need_x, need_w, need_ew and ew is not None,
        )  # fmt: skip
        return (gx if need_x else None, gw if need_w else None, gew if need_ew else None, *none4)


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    *,
    message: str | EdgeMessage,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    **_: object,
) -> dict[str, Tensor]:
    """See :func:`cmpnn_dist.ops.propagate` (``message="mul"``, CPU tensors only)."""
    if message != "mul":
        raise ValueError(f"ops impl 'cpu' covers message 'mul' only, got {message!r}")
    if x.device.type != "cpu":
        raise ValueError(f"ops impl 'cpu' needs CPU tensors, got x on {x.device}")
    if graph.num_edges >= 2**31 - 1:
        raise ValueError(f"ops impl 'cpu' takes < 2**31 edges, got {graph.num_edges}")
    (w,) = get_message(message).prepared(as_params(relation))  # [R2, 1 or B, d]
    ew = None
    if edge_weight is not None:
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        ew = edge_weight.to(acc)
        ew = ew.unsqueeze(1) if ew.dim() == 1 else ew.transpose(0, 1).contiguous()
    aggs = tuple(dict.fromkeys(aggregators))
    leaves = (x, w) if ew is None else (x, w, ew)  # argmax / argmin only when a backward can run
    need_arg = torch.is_grad_enabled() and any(t.requires_grad for t in leaves)
    x, w = x.contiguous(), w.contiguous()
    *outs, degree = _MulPropagate.apply(x, w, ew, graph, edge_mask, aggs, need_arg)
    return {**dict(zip(aggs, outs, strict=True)), "degree": degree}


def self_check() -> str:
    """Empty when the loaded kernel agrees with plain torch on a 3-node graph (forward sum /
    max, backward of x and w); else what differs.  Run once when the library is loaded."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 1, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    indptr, src, rel = (
        torch.tensor([0, 2, 2, 4]),
        torch.tensor([1, 2, 0, 2]),
        torch.tensor([0, 1, 1, 0]),
    )
    graph = Graph(3, 2, indptr, src, rel)
    msg = x[src] * w[rel]
    want_sum = torch.zeros_like(x).index_add(0, graph.dst(), msg)
    want_max = torch.stack([torch.maximum(msg[0], msg[1]), torch.zeros(2, 4, dtype=torch.float64),
                            torch.maximum(msg[2], msg[3])])  # fmt: skip
    (want_sum.sum() + want_max.sum()).backward()
    want_gx, want_gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    got_sum, got_max, degree = _MulPropagate.apply(x, w, None, graph, None, ("sum", "max"), True)
    (got_sum.sum() + got_max.sum()).backward()
    checks = {
        "sum": (got_sum, want_sum), "max": (got_max, want_max),
        "degree": (degree, torch.tensor([2.0, 0.0, 2.0], dtype=torch.float64)),
        "grad x": (x.grad, want_gx), "grad w": (w.grad, want_gw),
    }  # fmt: skip
    bad = [k for k, (got, want) in checks.items() if not torch.allclose(got, want)]
    keys = torch.tensor([0, 4, 1, 5, 3, 2])  # n = 3: queries 0 1 0 1 1 0; top 2 of each,
    got = select_senders(keys, torch.tensor([1.0, 2.0, 1.0, 0.0, 3.0, 1.0]), 3, 2, 2)
    if got.tolist() != [0, 1, 3, 4]:  # query 0's three-way tie goes to its first two rows
        bad.append("select_senders")
    return ", ".join(bad)


def select_senders(keys: Tensor, score: Tensor, n: int, batch: int, k: int) -> Tensor:
    """Sorted int64 keys of each query's top-``k`` items (``cpu_select.cpp``).

    Args: keys int64 [M] (``b * n + v``), score float [M]; ties: the earlier item.  The same
    items as :func:`cmpnn_dist.model.pruned_select.segment_topk` over ``keys // n``."""
    score = score.detach().float().contiguous()
    return torch.ops.cmpnn_cpu.select_senders(keys.contiguous(), score, n, batch, k)


def select_subgraph(
    s_keys: Tensor,
    n: int,
    batch: int,
    out_index: tuple[Tensor, Tensor, Tensor, Tensor],
    edge_mask: Tensor | None,
    slot: Tensor,
    score: Tensor,
    const_score: Tensor,
    e: int,
    num_relations: int,
    with_edges: bool = False,
) -> tuple[Tensor, Tensor, Graph, Tensor | None]:
    """The packed subgraph of one pruned layer: the top-``e`` out-edges per query of senders
    ``s_keys`` (int64 [S], sorted keys) by their receiver's score, packed by receiver.

    Args: ``out_index`` = (out_ptr [N+1], out_edge, out_dst, out_rel [E]) by source;
    ``edge_mask`` bool [E] in ``out_index`` order (``mask[out_edge]``, so that it is read
    sequentially) or None; ``slot`` int32 / int64 [B n]: the row of a visited key in
    ``score`` (float [M]), else -1 (then ``const_score[b]``, float [B]).

    Returns ``(node_keys int64 [P], s_rows int64 [S], packed, edge int64 [C] or None)``: the
    sorted keys of the senders and receivers (the packed rows), each sender's row, the
    receiver-sorted packed :class:`Graph` (src: sender rows; rel ``b * num_relations + r``;
    its :func:`transposed` view already cached, built in the same pass instead of by a sort)
    and the graph's id of each packed edge (``with_edges``).  The same graph as
    :func:`cmpnn_dist.model.pruned_select.select_subgraph` (the torch path), edges in its
    order."""
    node_keys, s_rows, indptr, src, rel, edge, *view = torch.ops.cmpnn_cpu.select_subgraph(
        s_keys.contiguous(), n, batch, *out_index, edge_mask, slot.contiguous(),
        score.detach().float().contiguous(), const_score.detach().float().contiguous(),
        e, num_relations, with_edges,
    )  # fmt: skip
    packed = Graph(node_keys.numel(), batch * num_relations, indptr, src, rel)
    _TRANSPOSED.put(packed, None, tuple(view))
    return node_keys, s_rows, packed, edge if with_edges else None


__all__ = ["propagate", "select_senders", "select_subgraph", "self_check", "transposed"]

# Build or load the library now (after self_check is defined: the load runs it).  Raises
# KernelUnavailable, so that the dispatcher treats impl=cpu as absent here.
cpu_build.load(self_check)
