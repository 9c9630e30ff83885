"""INIT: the initial pair representations h^(0)_{v|u,q} (paper section 4.1, appendix F).

    INIT 0:  h^(0)_{v|u,q} = 0
    INIT 1:  h^(0)_{v|u,q} = 1_{u=v} * 1
    INIT 2:  h^(0)_{v|u,q} = 1_{u=v} * z_q
    INIT 3:  h^(0)_{v|u,q} = 1_{u=v} * (z_q + eps_u),   eps_u ~ N(0, I) drawn per forward pass

INIT 1-3 satisfy target node distinguishability (INIT 3 in expectation); INIT 0 does not.
INIT 3 draws fresh noise in every forward pass, evaluation included, as the paper's code does;
its metrics therefore depend on torch's RNG state (the training loop evaluates inside
``isolated_rng``: reproducible for a seeded run, and training's RNG stream is untouched).
"""

from __future__ import annotations

import torch
from torch import Tensor

from cmpnn_dist.config import Init, choices

INIT_KINDS = choices(Init)  # the one list: cmpnn_dist.config


def head_states(kind: int, z_q: Tensor) -> Tensor:
    """h^(0)_{u|u,q}: the initial state of each query's head, float [B, d] (INIT 1-3; every
    other node starts at 0).  INIT 3 draws eps with torch's global RNG.

    Raises ValueError for INIT 0 (no head indicator) or an unknown kind."""
    if kind == 1:
        return torch.ones_like(z_q)
    if kind == 2:
        return z_q
    if kind == 3:
        return z_q + torch.randn_like(z_q)
    if kind == 0:
        raise ValueError("model.init 0 has no head indicator: every initial state is 0")
    raise ValueError(f"unknown model.init {kind!r}; choices: {INIT_KINDS}")


def initial_states(kind: int, heads: Tensor, z_q: Tensor, num_nodes: int) -> Tensor:
    """h^(0) for B queries (u_b, q_b).

    Args:
        kind: 0, 1, 2 or 3 (see the module docstring).
        heads: int64 [B], the source node u of each query.
        z_q: float [B, d], the query relation embeddings.
        num_nodes: |V|.

    Returns:
        float [N, B, d] (node-major, the layout of :func:`cmpnn_dist.ops.propagate`): 0
        except ``h[heads[b], b] = head_states(kind, z_q)[b]``.
    """
    batch, dim = z_q.shape
    h = z_q.new_zeros(num_nodes, batch, dim)
    if kind == 0:
        return h
    cols = torch.arange(batch, device=heads.device)
    return h.index_put((heads, cols), head_states(kind, z_q))
