"""The obvious message-passing implementation: the test oracle.

Materialises every kept message ``m_e`` (float [E', B, d]) at once, then reduces with
``index_add`` into zeros (sum, sumsq) and ``scatter_reduce`` into -inf / +inf (max, min),
whose rows without a kept in-edge are then set to 0.  (A zero base with
``include_self=False`` would be wrong for gradients: torch then still counts the base as a
tie when the maximum is exactly 0.)  The gradient of a max / min is shared evenly between
tied edges.  Equations: see :mod:`cmpnn_dist.ops`.
Any registered message function works (:mod:`cmpnn_dist.ops.messages`).
Memory is O(|E| B d): use it on small graphs only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.messages import EdgeMessage, as_params, get_message


def messages(
    x_src: Tensor,
    rel: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    message: str | EdgeMessage,
) -> Tensor:
    """Messages of edges with source states ``x_src`` [E, B, d] and relations ``rel`` [E]:
    the registered message function's ``compute`` (:mod:`cmpnn_dist.ops.messages`), e.g.
    ``mul``: ``x_src * relation[rel]``; ``basis``: ``W[rel] x_src``.  Returns [E, B, d]."""
    return get_message(message).messages(x_src, rel, as_params(relation))


def edge_scale(edge_weight: Tensor, edge_mask: Tensor | None) -> Tensor:
    """Weights of the kept edges as a multiplier of their messages: [E', B or 1, 1].

    ``edge_weight`` is float [E] (shared by the batch) or [B, E] (per query)."""
    w = edge_weight if edge_weight.dim() == 2 else edge_weight.unsqueeze(0)
    if edge_mask is not None:
        w = w[:, edge_mask]
    return w.transpose(0, 1).unsqueeze(-1)


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
    """See :func:`cmpnn_dist.ops.propagate`; extra keyword arguments are ignored."""
    src, rel, dst = graph.src, graph.rel, graph.dst()
    if edge_mask is not None:
        src, rel, dst = src[edge_mask], rel[edge_mask], dst[edge_mask]
    msg = messages(x[src], rel, relation, message)
    if edge_weight is not None:
        msg = msg * edge_scale(edge_weight, edge_mask).to(msg.dtype)
    num_nodes, batch, dim = x.shape
    out: dict[str, Tensor] = {}
    degree = torch.bincount(dst, minlength=num_nodes).to(x.dtype)
    empty = (degree == 0).view(-1, 1, 1)
    for agg in aggregators:
        zeros = x.new_zeros(num_nodes, batch, dim)
        if agg == "sum":
            out[agg] = zeros.index_add(0, dst, msg)
        elif agg == "sumsq":
            out[agg] = zeros.index_add(0, dst, msg * msg)
        else:
            index = dst.view(-1, 1, 1).expand_as(msg)
            reduce = "amax" if agg == "max" else "amin"
            base = torch.full_like(zeros, float("-inf") if agg == "max" else float("inf"))
            out[agg] = base.scatter_reduce(0, index, msg, reduce=reduce).masked_fill(empty, 0.0)
    out["degree"] = degree
    return out
