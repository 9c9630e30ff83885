"""The decoder: p(v | u, q) = sigmoid(f([h^(T)_{v|u,q} || z_q])), f a 2-layer MLP (section 6.1).

    f(x) = W_b ReLU(W_a x + c_a) + c_b,   W_a: 2d -> decoder_hidden_dim,  W_b: -> 1

The first layer is applied in split form W_a [h || z] = W_a^h h + W_a^z z so that the
concatenation [B, N, 2d] is never built; the parameters are those of Linear(2d, hidden).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

from cmpnn_dist.ops import ordered


class Decoder(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.dim = dim
        self.hidden = nn.Linear(2 * dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, 1)

    def forward(self, h: Tensor, z_q: Tensor) -> Tensor:
        """Args: h float [B, N, d] (h^(T)); z_q float [B, d].  Returns: logits float [B, N]."""
        return self._logits(h, self._query_part(z_q).unsqueeze(1))

    def rows(self, h: Tensor, z_q: Tensor, query: Tensor) -> Tensor:
        """Logits float [M] of M (query, node) rows: h float [M, d] (their states), z_q float
        [B, d], query int64 [M] (each row's query); W_a^z z_q + c_a once per query, not per
        row (pruned propagation's priorities and its final scores).  On the CPU the backward
        runs on the rows whose logit has a nonzero gradient only (:class:`_SparseRowLogits`;
        elsewhere plain autograd: finding those rows would read the device back)."""
        if h.device.type != "cpu":
            return self._logits(h, self._query_part(z_q).index_select(0, query))
        weight = self.hidden.weight[:, : self.dim]
        return _SparseRowLogits.apply(
            h, self._query_part(z_q), query, weight, self.out.weight, self.out.bias
        )

    def _query_part(self, z_q: Tensor) -> Tensor:
        """W_a^z z_q + c_a, float [B, H]."""
        return F.linear(z_q, self.hidden.weight[:, self.dim :], self.hidden.bias)

    def _logits(self, h: Tensor, query_part: Tensor) -> Tensor:
        """W_b ReLU(W_a^h h + query_part) + c_b, with query_part broadcast against h's rows."""
        hidden = ordered.linear(h, self.hidden.weight[:, : self.dim]) + query_part
        return ordered.linear(F.relu(hidden), self.out.weight, self.out.bias).squeeze(-1)


class _SparseRowLogits(torch.autograd.Function):
    """(h [M, d], qp [B, H], query int64 [M], W_h [H, d], w_b [1, H], c_b [1]) -> logits [M],

        logit_i = w_b ReLU(W_h h_i + qp[query_i]) + c_b,

    whose backward recomputes the hidden layer for the rows with a nonzero gradient only.  In
    pruned propagation a layer scores its P ~ 10^5 rows, but a row's priority gets a gradient
    only when it gates a sender or is a candidate of the loss: a few thousand rows.  Exact
    (the same products, on the rows that matter); computed in the promoted dtype."""

    @staticmethod
    def forward(
        ctx: FunctionCtx,
        h: Tensor,
        qp: Tensor,
        query: Tensor,
        w_h: Tensor,
        w_b: Tensor,
        c_b: Tensor,
    ) -> Tensor:
        hidden = _add_query_part(F.linear(h, w_h), qp, query)
        ctx.save_for_backward(h, qp, query, w_h, w_b)
        return ordered.linear(hidden.relu_(), w_b, c_b).squeeze(-1)  # hidden: not kept

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor):
        h, qp, query, w_h, w_b = ctx.saved_tensors
        dtype = torch.promote_types(torch.promote_types(h.dtype, qp.dtype), w_h.dtype)
        nz = grad.nonzero().squeeze(1)
        g = grad.index_select(0, nz).to(dtype).unsqueeze(1)  # [K, 1]
        h_nz, q_nz = h.index_select(0, nz).to(dtype), query.index_select(0, nz)
        hidden = F.linear(h_nz, w_h.to(dtype)) + qp.to(dtype).index_select(0, q_nz)
        act = F.relu(hidden)
        g_hidden = (g * w_b.to(dtype)) * (hidden > 0)  # [K, H]
        g_h = h.new_zeros(h.shape).index_copy_(0, nz, (g_hidden @ w_h.to(dtype)).to(h.dtype))
        g_qp = qp.new_zeros(qp.shape).index_add_(0, q_nz, g_hidden.to(qp.dtype))
        g_w_h = ordered.contract(g_hidden.t(), h_nz).to(w_h.dtype)
        g_w_b = ordered.contract(g.t(), act).to(w_b.dtype)
        g_c_b = ordered.sum_rows(g).to(w_b.dtype)
        needs = ctx.needs_input_grad
        return (
            g_h if needs[0] else None,
            g_qp if needs[1] else None,
            None,
            g_w_h if needs[3] else None,
            g_w_b if needs[4] else None,
            g_c_b if needs[5] else None,
        )


def _add_query_part(hidden: Tensor, qp: Tensor, query: Tensor) -> Tensor:
    """``hidden + qp[query]`` in place (hidden float [M, H], qp [B, H], query int64 [M]): one
    broadcast add per query when the rows come grouped by query (a pruned layer's rows, sorted
    by key), else through a gather."""
    if query.numel() > 1 and bool((query[1:] >= query[:-1]).all()):
        counts = torch.bincount(query, minlength=qp.shape[0]).tolist()
        for b, part in enumerate(hidden.split(counts)):
            part.add_(qp[b])
        return hidden
    return hidden.add_(qp.index_select(0, query))
