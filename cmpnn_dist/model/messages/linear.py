"""MSG 3 of the paper (section 4.1): a linear map per relation, ops message ``basis``.

    MSG 3 (linear):  MSG_r(h_w, z_q) = W_r^(t) h_w,   W_r = sum_k coef[r, k] V_k

with ``model.num_bases`` bases V [nb, d, d] (basis decomposition, as R-GCN); with
``num_bases=None`` every relation has its own full W_r (coef is a fixed identity, nb = R2).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.model.messages.base import MessageFunction, register


@register
class Linear(MessageFunction):
    """MSG 3: ``relations`` returns ``(bases [nb, d, d], coef [R2, nb])``."""

    name, number, edge_message = "linear", 3, "basis"
    formula = "W_r h, W_r = sum_k coef[r, k] V_k"

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__(num_relations, dim, cfg)
        num_bases = cfg.num_bases
        bound = 1.0 / math.sqrt(dim)
        nb = num_relations if num_bases is None else int(num_bases)
        self.bases = nn.Parameter(torch.empty(nb, dim, dim).uniform_(-bound, bound))
        if num_bases is None:
            self.register_buffer("coef", torch.eye(num_relations))
        else:  # var(W_r) = nb * (1/nb) * var(V) = var(V)
            self.coef = nn.Parameter(torch.randn(num_relations, nb) / math.sqrt(nb))

    def relations(self, z_q: Tensor) -> tuple[Tensor, Tensor]:
        return self.bases, self.coef

    def pack(self, relation: tuple[Tensor, Tensor], batch: int) -> tuple[Tensor, Tensor]:
        """``(bases, coef [R2, nb])`` -> ``(bases, coef repeated [B R2, nb])``: the bases are
        shared, the packed relation ``b * R2 + r`` is relation r."""
        bases, coef = relation
        return bases, coef.repeat(batch, 1)

    def relation_matrix(self, z_q: Tensor, b: int, r: int) -> Tensor:
        """W_r [d, d] (for slow checks)."""
        return torch.einsum("k,kij->ij", self.coef[r], self.bases)
