"""Plain-torch message passing in destination-row blocks: the default vectorised path
(``ops.impl=reference``, the name the config keeps; the CPU training path).  The test oracle
is :mod:`cmpnn_dist.ops.naive`.

The blocks, reductions, tie counts and the recompute-in-backward scheme are
:mod:`cmpnn_dist.ops.chunked`'s.  This module adds hand-written kernels for the two messages
it specialises (``FAST_MESSAGES``); their backward needs no autograd:

    mul:   d x[src_e] += d m_e * w[rel_e],      d w[rel_e] += d m_e * x[src_e]
    basis: d x[src_e] += W_{rel_e}^T d m_e,     d W_{rel_e} += d m_e x[src_e]^T

Any other registered message (:mod:`cmpnn_dist.ops.messages`) runs through the same engine
with :class:`cmpnn_dist.ops.generic.GenericKernel` (autograd through the message function per
piece), so ``impl=reference`` accepts every message.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.chunked import HALF, Kernel, gather, in_float32, make_blocks, run, scratch
from cmpnn_dist.ops.generic import GenericKernel
from cmpnn_dist.ops.messages import EdgeMessage, as_params, get_message

FAST_MESSAGES = ("mul", "basis")


class MulKernel(Kernel):
    """``x[src] * w[rel]``, params ``(w [R2, B or 1, d],)`` (``mul``'s prepared layout)."""

    def messages(self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor) -> Tensor:
        return gather(x, src, 0).mul_(gather(params[0], rel, 1))

    def backward(self, x, params, src, rel, gm, state, gx, gparams) -> None:  # noqa: ANN001
        (w,), (gw,) = params, gparams
        if gw is not None:
            t = torch.mul(gm, gather(x, src, 0), out=scratch(7, gm.shape, x))
            gw.index_add_(0, rel, t.sum(1, keepdim=True) if w.shape[1] == 1 else t)
        if gx is not None:
            gx.index_add_(0, src, gm.mul_(gather(w, rel, 1)))


class BasisKernel(Kernel):
    """``x[src] @ W[rel]^T``, params ``(W [R2, d, d],)`` (``basis``'s prepared layout)."""

    def __init__(self, dim: int):
        self.extra_per_edge = dim * dim  # the gathered W_r of a piece

    def messages(self, x: Tensor, params: tuple[Tensor, ...], src: Tensor, rel: Tensor) -> Tensor:
        xs = gather(x, src, 0)
        out = scratch(2, xs.shape, x)
        return torch.bmm(xs, gather(params[0], rel, 1).transpose(1, 2), out=out)

    def backward(self, x, params, src, rel, gm, state, gx, gparams) -> None:  # noqa: ANN001
        (w,), (gw,) = params, gparams
        xs = gather(x, src, 0)
        if gw is not None:  # dW_e = gm_e^T xs_e  [n, d, d]
            gw.index_add_(0, rel, torch.bmm(gm.transpose(1, 2), xs))
        if gx is not None:
            gx.index_add_(0, src, torch.bmm(gm, gather(w, rel, 1), out=xs))


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
    """See :func:`cmpnn_dist.ops.propagate`.  bfloat16 / float16 inputs are computed in
    float32 and the results cast back once (:func:`cmpnn_dist.ops.chunked.in_float32`)."""
    kw = dict(message=message, aggregators=aggregators, edge_mask=edge_mask,
              edge_weight=edge_weight, chunk_elements=chunk_elements)  # fmt: skip
    if x.dtype in HALF:
        return in_float32(propagate, graph, x, relation, **kw)
    edge = get_message(message)
    params = edge.prepared(as_params(relation))  # mul: [R2, B or 1, d]; basis: W [R2, d, d]
    kernel: Kernel
    if message == "mul":  # registered names only: an EdgeMessage object runs generic
        kernel = MulKernel()
    elif message == "basis":
        kernel = BasisKernel(x.shape[-1])
    else:
        kernel = GenericKernel(edge, params, graph.num_relations)
    return run(graph, x, params, kernel, aggregators, edge_mask, edge_weight, chunk_elements)


__all__ = ["FAST_MESSAGES", "BasisKernel", "MulKernel", "make_blocks", "propagate"]
