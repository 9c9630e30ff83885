"""The generic gather-then-reduce path (``impl=generic``): any registered message function.

Runs :mod:`cmpnn_dist.ops.chunked`'s blocks (bounded memory: one piece of at most
``chunk_elements`` message entries at a time, forward or backward) with the message function's
own ``prepare`` (once per call, ordinary autograd) and ``compute`` (per piece;
:mod:`cmpnn_dist.ops.messages`).  Forward computes each piece's messages
without autograd; backward recomputes them with autograd on the piece's gathered source states
``x[src]`` [n, B, d] and on the relation parameters, and pulls the piece's message gradient
back through ``compute`` with one ``torch.autograd.grad``; ``x``'s gradient is then scattered
with ``index_add``.  Each piece's parameter gradient is a tensor of the parameters' size
(small: [R2, d], [B, R2, d] or bases), added up over the pieces.

This is the fallback of ``impl=auto`` / ``reference`` for messages without specialised code,
and a cross-check of those specialised kernels on the messages they do cover.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.chunked import HALF, Kernel, in_float32, run
from cmpnn_dist.ops.messages import EdgeMessage, as_params, get_message


class GenericKernel(Kernel):
    """A piece's messages from ``message.compute`` on the prepared parameters; gradients by
    autograd through it."""

    in_place = False  # compute may return a fresh tensor or a view: never modified in place

    def __init__(self, message: EdgeMessage, prepared: tuple[Tensor, ...], num_relations: int):
        self.message = message
        # rows of relation-major tables a piece gathers per edge (a basis message's W_r is
        # d x d): counted in the piece budget, as reference's basis kernel does
        self.extra_per_edge = sum(
            p[0].numel() for p in prepared if p.dim() > 0 and p.shape[0] == num_relations
        )

    def messages(self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor) -> Tensor:
        return self.message.compute(torch.index_select(x, 0, src), rel, params)

    def recompute(self, x, params, src, rel):  # noqa: ANN001, ANN201
        state = self._graph(x, params, src, rel)
        return state[0].detach(), state

    def _graph(self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor) -> tuple:
        with torch.enable_grad():
            xs = torch.index_select(x, 0, src).detach().requires_grad_()
            leaves = tuple(p.detach().requires_grad_(p.is_floating_point()) for p in params)
            return self.message.compute(xs, rel, leaves), xs, leaves

    def backward(self, x, params, src, rel, gm, state, gx, gparams) -> None:  # noqa: ANN001
        msg, xs, leaves = state if state is not None else self._graph(x, params, src, rel)
        wanted = ([xs] if gx is not None else []) + [
            p for p, g in zip(leaves, gparams, strict=True) if g is not None
        ]
        grads = list(torch.autograd.grad(msg, wanted, gm, allow_unused=True))
        if gx is not None:
            gx.index_add_(0, src, grads.pop(0))
        for g_acc in gparams:
            if g_acc is not None:
                g = grads.pop(0)
                if g is not None:
                    g_acc.add_(g)


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    *,
    message: str | EdgeMessage,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    chunk_elements: int = 1 << 24,
    **_: object,
) -> dict[str, Tensor]:
    """See :func:`cmpnn_dist.ops.propagate`: any registered message (or an
    :class:`~cmpnn_dist.ops.messages.EdgeMessage` object)."""
    if x.dtype in HALF:
        return in_float32(propagate, graph, x, relation, message=message, aggregators=aggregators,
                          edge_mask=edge_mask, edge_weight=edge_weight,
                          chunk_elements=chunk_elements)  # fmt: skip
    edge = get_message(message)
    params = edge.prepared(as_params(relation))  # differentiable, outside the pieces
    kernel = GenericKernel(edge, params, graph.num_relations)
    return run(graph, x, params, kernel, aggregators, edge_mask, edge_weight, chunk_elements)
