"""INIT: the initial pair representations h^(0)_{v|u,q} (paper section 4.1, appendix F).

    INIT 0:  h^(0)_{v|u,q} = 0
    INIT 1:  h^(0)_{v|u,q} = 1_{u=v} * 1
    INIT 2:  h^(0)_{v|u,q} = 1_{u=v} * z_q
    INIT 3:  h^(0)_{v|u,q} = 1_{u=v} * (z_q + eps_u),   eps_u ~ N(0, I) drawn per forward pass

INIT 1-3 satisfy target node distinguishability (INIT 3 in expectation); INIT 0 does not.

``model.init_noise=uniform`` adds, to every node of every query, noise drawn in each forward
pass (evaluation included):

    h^(0)_{v|u,q} = INIT(u, v, q) + n_{v,q},   n_{v,q} ~ U[0, 1)^d

which is what the paper's code computes (HxyScotthuang/CMPNN, ``cmpnn/model.py``,
``CMPNN.bellmanford``: ``boundary = torch.rand(num_node, batch, dim)``, then the query vector
``scatter_add``-ed at the source; its ``AllZero`` initialisation is the noise alone), unlike the
paper's equations (zero away from u) and NBFNet (zeros).  The default, ``none``, is the paper's
equations.
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


def initial_states(
    kind: int, heads: Tensor, z_q: Tensor, num_nodes: int, noise: str = "none"
) -> Tensor:
    """h^(0) for B queries (u_b, q_b).

    Args:
        kind: 0, 1, 2 or 3 (see the module docstring).
        heads: int64 [B], the source node u of each query.
        z_q: float [B, d], the query relation embeddings.
        num_nodes: |V|.
        noise: ``none`` or ``uniform`` (``model.init_noise``; drawn with torch's global RNG).

    Returns:
        float [N, B, d] (node-major, the layout of :func:`cmpnn_dist.ops.propagate`): the noise
        (0 for ``none``), plus ``head_states(kind, z_q)[b]`` at ``h[heads[b], b]``.
    """
    batch, dim = z_q.shape
    if noise == "uniform":
        h = torch.rand(num_nodes, batch, dim, dtype=z_q.dtype, device=z_q.device)
    elif noise == "none":
        h = z_q.new_zeros(num_nodes, batch, dim)
    else:
        raise ValueError(f"unknown model.init_noise {noise!r}; choices: none, uniform")
    if kind == 0:
        return h
    cols = torch.arange(batch, device=heads.device)
    return h.index_put((heads, cols), head_states(kind, z_q), accumulate=True)
