"""MSG 1 and MSG 2 of the paper (section 4.1): elementwise products, ops message ``mul``.

    MSG 1 (query_mul):     MSG_r(h_w, z_q) = h_w * W_r^(t) z_q    W^(t): Linear d -> R2 d on z_q
    MSG 2 (relation_mul):  MSG_r(h_w, z_q) = h_w * b_r^(t)        b^(t): [R2, d]

``*`` is the elementwise product; MSG 1 is NBFNet's DistMult with query-dependent relations.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.model.messages.base import MessageFunction, register
from cmpnn_dist.ops import ordered


@register
class QueryMul(MessageFunction):
    """MSG 1: relation vectors W_r z_q [B, R2, d]."""

    name, number, edge_message = "query_mul", 1, "mul"
    formula = "h * W_r z_q"

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__(num_relations, dim, cfg)
        self.relation_linear = nn.Linear(dim, num_relations * dim)

    def relations(self, z_q: Tensor) -> Tensor:
        return ordered.linear(z_q, self.relation_linear.weight, self.relation_linear.bias).view(
            -1, self.num_relations, self.dim
        )

    def relation_matrix(self, z_q: Tensor, b: int, r: int) -> Tensor:
        """diag(W_r z_q) [d, d] of query b (for slow checks)."""
        return torch.diag(self.relations(z_q)[b, r])


@register
class RelationMul(MessageFunction):
    """MSG 2: one learned vector per relation, b [R2, d], shared by every query."""

    name, number, edge_message = "relation_mul", 2, "mul"
    formula = "h * b_r"

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__(num_relations, dim, cfg)
        self.relation = nn.Parameter(torch.randn(num_relations, dim))

    def relations(self, z_q: Tensor) -> Tensor:
        return self.relation

    def relation_matrix(self, z_q: Tensor, b: int, r: int) -> Tensor:
        """diag(b_r) [d, d] (for slow checks)."""
        return torch.diag(self.relation[r])
