"""MSG_r^(t): the relation-specific message functions of one layer (paper section 4.1).

    MSG 1:  MSG_r(h_w, z_q) = h_w * W_r^(t) z_q     W^(t): Linear d -> R2 d applied to z_q
    MSG 2:  MSG_r(h_w, z_q) = h_w * b_r^(t)         b^(t): [R2, d]
    MSG 3:  MSG_r(h_w, z_q) = W_r^(t) h_w           W_r = sum_k coef[r, k] V_k (basis decomposition,
                                                    ``num_bases`` bases V [nb, d, d]); with
                                                    ``num_bases=None`` every relation has its own
                                                    full W_r (coef is a fixed identity, nb = R2)

``*`` is the elementwise product; R2 = 2|R| counts inverse relations.  The module only produces
the relation parameters in the layout that :func:`cmpnn_dist.ops.propagate` expects; the
per-edge work happens there.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

MESSAGE_KINDS = (1, 2, 3)


class MessageFunction(nn.Module):
    """Relation parameters of one layer.

    Args:
        kind: 1, 2 or 3.
        num_relations: R2 (with inverses).
        dim: d.
        num_bases: MSG 3 only; None = one full matrix per relation.
    """

    def __init__(self, kind: int, num_relations: int, dim: int, num_bases: int | None = None):
        super().__init__()
        if kind not in MESSAGE_KINDS:
            raise ValueError(f"unknown model.message {kind!r}; choices: {MESSAGE_KINDS}")
        self.kind, self.num_relations, self.dim = kind, num_relations, dim
        bound = 1.0 / math.sqrt(dim)
        if kind == 1:
            self.relation_linear = nn.Linear(dim, num_relations * dim)
        elif kind == 2:
            self.relation = nn.Parameter(torch.randn(num_relations, dim))
        else:
            if num_bases is not None and num_bases < 1:
                raise ValueError(f"model.num_bases must be >= 1 or null, got {num_bases}")
            nb = num_relations if num_bases is None else int(num_bases)
            self.bases = nn.Parameter(torch.empty(nb, dim, dim).uniform_(-bound, bound))
            if num_bases is None:
                self.register_buffer("coef", torch.eye(num_relations))
            else:  # var(W_r) = nb * (1/nb) * var(V) = var(V)
                self.coef = nn.Parameter(torch.randn(num_relations, nb) / math.sqrt(nb))

    def forward(self, z_q: Tensor) -> tuple[str, Tensor | tuple[Tensor, Tensor]]:
        """Args: z_q float [B, d].  Returns ``(message, relation)`` for ``propagate``:
        MSG 1 ``("mul", [B, R2, d])``, MSG 2 ``("mul", [R2, d])``,
        MSG 3 ``("basis", (bases [nb, d, d], coef [R2, nb]))``."""
        if self.kind == 1:
            return "mul", self.relation_linear(z_q).view(-1, self.num_relations, self.dim)
        if self.kind == 2:
            return "mul", self.relation
        return "basis", (self.bases, self.coef)

    def relation_matrix(self, z_q: Tensor, b: int, r: int) -> Tensor:
        """The per-(query, relation) operator as a dense [d, d] matrix (for slow checks):
        diag(W_r z_q) for MSG 1, diag(b_r) for MSG 2, W_r for MSG 3."""
        _, relation = self.forward(z_q)
        if self.kind == 1:
            return torch.diag(relation[b, r])
        if self.kind == 2:
            return torch.diag(relation[r])
        bases, coef = relation
        return torch.einsum("k,kij->ij", coef[r], bases)
