"""TransE message (NBFNet's ``transe``; Bordes et al., 2013): a translation per relation.

    MSG_r(h_w, z_q) = h_w + r_q,     r_q = W_r^(t) z_q     W^(t): Linear d -> R2 d on z_q

The relation vectors depend on the query, as MSG 1's (NBFNet's ``dependent=True``).  Per edge
(ops message ``transe``): ``m_e = x[src_e] + r[.., rel_e, :]`` with relation [R2, d] (shared)
or [B, R2, d] (per query).  No specialised kernel: ``ops.propagate`` runs it on the generic
path (``impl=auto`` / ``reference`` / ``generic``), ``naive`` and ``scatter``.
"""

from __future__ import annotations

from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.model.messages.base import MessageFunction, register
from cmpnn_dist.ops import ordered
from cmpnn_dist.ops.messages import (
    EdgeMessage,
    Params,
    check_vector_relation,
    prepare_vector,
    register_message,
    relation_rows,
)


def transe(x_src: Tensor, rel: Tensor, prepared: Params) -> Tensor:
    """``x_src`` [n, B, d] + the rows ``rel`` [n] of the relation table (prepared
    relation-major: [R2, B or 1, d])."""
    return x_src + relation_rows(prepared[0], rel)


def _check(params: Params, r2: int, batch: int, dim: int) -> None:
    check_vector_relation("transe", params, r2, batch, dim)


EDGE = register_message(
    EdgeMessage("transe", transe, _check, "m = x[src] + r[rel]", prepare_vector)
)


@register
class TransE(MessageFunction):
    """Relation vectors W_r z_q [B, R2, d]."""

    name, edge_message = "transe", "transe"
    formula = "h + W_r z_q"

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__(num_relations, dim, cfg)
        self.relation_linear = nn.Linear(dim, num_relations * dim)

    def relations(self, z_q: Tensor) -> Tensor:
        return ordered.linear(z_q, self.relation_linear.weight, self.relation_linear.bias).view(
            -1, self.num_relations, self.dim
        )
