"""RotatE message (Sun et al., 2019; NBFNet's ``rotate``): a rotation in the complex plane.

With d even, a state h is read as d/2 complex numbers ``h_re + i h_im`` (h_re = h[:d/2],
h_im = h[d/2:]), and each relation rotates every one by its own phase:

    MSG_r(h_w, z_q) = h_w o e^{i theta_r},    theta_r = W_r^(t) z_q     W^(t): d -> R2 d/2
    i.e.  m_re = h_re cos(theta) - h_im sin(theta),   m_im = h_re sin(theta) + h_im cos(theta)

A true rotation (|m_k| = |h_k| for every complex coordinate): the relation is a phase, where
NBFNet's code multiplies by an unnormalised complex relation.  Phases depend on the query, as
MSG 1's.  Per edge (ops message ``rotate``): relation = phases [R2, d/2] (shared) or
[B, R2, d/2] (per query).  No specialised kernel (generic path, ``naive``, ``scatter``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.model.messages.base import MessageFunction, register
from cmpnn_dist.ops import ordered
from cmpnn_dist.ops.messages import (
    EdgeMessage,
    Params,
    check_vector_relation,
    register_message,
    relation_major,
    relation_rows,
)


def prepare(params: Params) -> Params:
    """Phases [R2, d/2] / [B, R2, d/2] -> (cos, sin) tables [R2, B or 1, d/2], once per call."""
    theta = relation_major(params[0])
    return torch.cos(theta), torch.sin(theta)


def rotate(x_src: Tensor, rel: Tensor, prepared: Params) -> Tensor:
    """``x_src`` [n, B, d] rotated by the phases of relations ``rel`` [n] (prepared cos / sin)."""
    cos, sin = (relation_rows(t, rel) for t in prepared)
    re, im = x_src.chunk(2, dim=-1)
    return torch.cat([re * cos - im * sin, re * sin + im * cos], dim=-1)


def _check(params: Params, r2: int, batch: int, dim: int) -> None:
    if dim % 2:
        raise ValueError(f"message='rotate' needs an even hidden dim d, got d={dim}")
    check_vector_relation("rotate", params, r2, batch, dim // 2)


EDGE = register_message(
    EdgeMessage(
        "rotate", rotate, _check, "m = x[src] o exp(i theta[rel]) (complex halves)", prepare
    )
)


@register
class RotatE(MessageFunction):
    """Phases W_r z_q [B, R2, d/2]."""

    name, edge_message = "rotate", "rotate"
    formula = "h o exp(i W_r z_q)"

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        if cfg.hidden_dim % 2:
            raise ValueError(
                f"model.message=rotate needs an even model.hidden_dim, got {cfg.hidden_dim}"
            )

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__(num_relations, dim, cfg)
        self.phase_linear = nn.Linear(dim, num_relations * (dim // 2))

    def relations(self, z_q: Tensor) -> Tensor:
        return ordered.linear(z_q, self.phase_linear.weight, self.phase_linear.bias).view(
            -1, self.num_relations, self.dim // 2
        )
