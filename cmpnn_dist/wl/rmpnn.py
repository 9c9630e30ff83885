"""A tiny R-MPNN (paper section 3.2), the reference unary model for the rwl_1 theorem.

    h^(0)_v     = x_v                                     (a learned embedding of c(v))
    h^(t+1)_v   = ReLU(W_0^(t) h^(f(t))_v + AGG({{ W_r^(t) h^(t)_w | w in N_r(v), r in R }}))
    score(u, v | q) = MLP([h^(T)_u || h^(T)_v || z_q])     (binary decoder)

AGG is sum, mean or max over the in-edges of v; f(t) = t or 0.  It uses plain torch
(``index_add_`` / ``scatter_reduce_``) on the model's :class:`cmpnn_dist.graph.Graph` CSR, and
exists for the expressivity tests and the logic benchmark, not for training at scale.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.graph import Graph


class RMPNN(nn.Module):
    """R-MPNN over ``num_relations`` edge relation ids (the Graph's), ``num_layers`` layers.

    Args:
        num_relations: edge relation ids (``graph.num_relations``).
        dim: hidden width d.
        aggregate: ``sum`` | ``mean`` | ``max``.
        history: ``t`` (f(t) = t) or ``0`` (f(t) = 0).
        num_colours: number of initial node colours c(v) (default 1: constant features).
        num_queries: query relations for the decoder's z_q (default ``num_relations``).
    """

    def __init__(
        self,
        num_relations: int,
        dim: int,
        num_layers: int,
        aggregate: str = "sum",
        history: str = "t",
        num_colours: int = 1,
        num_queries: int | None = None,
    ):
        super().__init__()
        if aggregate not in ("sum", "mean", "max"):
            raise ValueError(f"aggregate must be sum, mean or max, got {aggregate!r}")
        self.aggregate, self.history = aggregate, str(history)
        self.num_relations, self.dim = num_relations, dim
        self.colour = nn.Embedding(num_colours, dim)
        self.self_linear = nn.ModuleList(nn.Linear(dim, dim) for _ in range(num_layers))
        self.rel_weight = nn.ParameterList(
            nn.Parameter(torch.randn(num_relations, dim, dim) / dim**0.5) for _ in range(num_layers)
        )
        self.query = nn.Embedding(num_queries or num_relations, dim)
        self.decoder = nn.Sequential(nn.Linear(3 * dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, 1))

    def node_states(self, graph: Graph, colours: Tensor | None = None) -> Tensor:
        """h^(T): float [N, d].  ``colours``: int64 [N] initial node colours (default all 0)."""
        n = graph.num_nodes
        if colours is None:
            colours = torch.zeros(n, dtype=torch.long, device=graph.src.device)
        h0 = self.colour(colours)
        h = h0
        dst = graph.dst()
        for lin, w in zip(self.self_linear, self.rel_weight, strict=True):
            msg = torch.einsum("ed,edk->ek", h[graph.src], w[graph.rel].transpose(1, 2))
            agg = h.new_zeros(n, self.dim)
            if self.aggregate == "max":
                index = dst[:, None].expand_as(msg)
                agg = agg.scatter_reduce_(0, index, msg, "amax", include_self=False)
            else:
                agg = agg.index_add_(0, dst, msg)
                if self.aggregate == "mean":
                    agg = agg / graph.in_degree().clamp(min=1).to(agg.dtype)[:, None]
            hist = h if self.history == "t" else h0
            h = torch.relu(lin(hist) + agg)
        return h

    def forward(
        self, graph: Graph, heads: Tensor, rels: Tensor, colours: Tensor | None = None
    ) -> Tensor:
        """Scores of every tail v for queries (heads [B], rels [B]): float [B, N]."""
        h = self.node_states(graph, colours)
        b, n = heads.shape[0], graph.num_nodes
        hu = h[heads][:, None, :].expand(b, n, self.dim)
        hv = h[None].expand(b, n, self.dim)
        zq = self.query(rels)[:, None, :].expand(b, n, self.dim)
        return self.decoder(torch.cat([hu, hv, zq], -1)).squeeze(-1)
