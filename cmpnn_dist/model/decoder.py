"""The decoder: p(v | u, q) = sigmoid(f([h^(T)_{v|u,q} || z_q])), f a 2-layer MLP (section 6.1).

    f(x) = W_b ReLU(W_a x + c_a) + c_b,   W_a: 2d -> decoder_hidden_dim,  W_b: -> 1

The first layer is applied in split form W_a [h || z] = W_a^h h + W_a^z z so that the
concatenation [B, N, 2d] is never built; the parameters are those of Linear(2d, hidden).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


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
        row (pruned propagation's priorities and its final scores)."""
        return self._logits(h, self._query_part(z_q).index_select(0, query))

    def _query_part(self, z_q: Tensor) -> Tensor:
        """W_a^z z_q + c_a, float [B, H]."""
        return F.linear(z_q, self.hidden.weight[:, self.dim :], self.hidden.bias)

    def _logits(self, h: Tensor, query_part: Tensor) -> Tensor:
        """W_b ReLU(W_a^h h + query_part) + c_b, with query_part broadcast against h's rows."""
        hidden = F.linear(h, self.hidden.weight[:, : self.dim]) + query_part
        return self.out(F.relu(hidden)).squeeze(-1)
