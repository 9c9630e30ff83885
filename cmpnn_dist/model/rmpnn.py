"""R-MPNN baselines the paper compares against (transductive only): R-GCN and CompGCN with
learned node embeddings and a DistMult decoder, behind the same ``forward`` as :class:`CMPNN`.

Both compute one representation per node (not per query pair: the "R-MPNN" of the paper,
as powerful as rwl_1), once per forward over the whole graph, then score every tail with
DistMult::

    score(u, q, v) = sum_k h_u[k] * R_q[k] * h_v[k]          (R_q: a vector per query relation)

**R-GCN** (Schlichtkrull et al., 2018), layer l::

    h_v' = act( W_0 h_v + sum_r sum_{u in N_r(v)} (1 / c_{v,r}) W_r h_u ),  W_r = sum_b a_rb V_b

with ``c_{v,r}`` the number of r-edges into v (kept edges only), ReLU between layers, none after
the last; ``model.num_bases`` bases (None: 2|R|).  DistMult's R_q is a free vector per relation.

**CompGCN** (Vashishth et al., 2020), multiplicative composition phi(x, z) = x * z, layer l::

    h_v' = tanh( (W_O sum_{(u,r) in N_in(v)} n_uv (h_u * z_r)
                 + W_I sum_{(u,r^-1) in N_in(v)} n_uv (h_u * z_r^-1) + W_S (h_v * z_self)) / 3 )
    z_r' = W_rel z_r

with ``n_uv = 1 / sqrt(deg(u) deg(v))`` over kept edges (original and inverse edges are the two
directions of the graph's edge list: relations < |R| and >= |R|).  DistMult's R_q is the last
layer's ``z_q``.

Both use :func:`cmpnn_dist.ops.propagate` with one "query" (B = 1), so they run on every ops
implementation that covers the message (``basis`` / ``mul``) and honour ``edge_mask`` (query-edge
removal) and ``edge_weight`` like the C-MPNN.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import Graph
from cmpnn_dist.ops import propagate


def _kept(graph: Graph, edge_mask: Tensor | None) -> Tensor:
    ones = torch.ones(graph.num_edges, dtype=torch.bool, device=graph.src.device)
    return ones if edge_mask is None else edge_mask


def _times(weight: Tensor, edge_weight: Tensor | None) -> Tensor:
    if edge_weight is None:
        return weight
    return weight * (edge_weight if edge_weight.dim() == 1 else edge_weight[0])


class _RelationalBase(nn.Module):
    """Node embeddings, DistMult scoring and the shared argument checks."""

    def __init__(self, num_nodes: int, num_relations: int, cfg: ModelConfig, ops: OpsConfig):
        super().__init__()
        if num_nodes < 1 or num_relations < 1:
            raise ValueError(
                f"need num_nodes, num_relations >= 1, got {num_nodes}, {num_relations}"
            )
        self.cfg, self.ops = cfg, ops
        self.num_nodes, self.num_relations = int(num_nodes), int(num_relations)
        self.node = nn.Embedding(num_nodes, cfg.hidden_dim)
        nn.init.xavier_uniform_(self.node.weight)  # the paper's (appendix) initialisation
        self.dropout = nn.Dropout(cfg.dropout)

    def _pass(
        self, graph: Graph, x: Tensor, relation: object, message: str, **kw: object
    ) -> Tensor:
        out = propagate(
            graph, x.unsqueeze(1), relation, message=message, aggregators=("sum",),
            impl=self.ops.impl, chunk_elements=self.ops.chunk_elements, **kw,
        )  # fmt: skip
        return out["sum"].squeeze(1)

    def _check(self, graph: Graph, heads: Tensor, rels: Tensor) -> None:
        if graph.num_nodes != self.num_nodes:
            raise ValueError(
                f"{type(self).__name__} learns one embedding per node of the training graph "
                f"({self.num_nodes}); this graph has {graph.num_nodes} (R-MPNN baselines are "
                "transductive only)"
            )
        if graph.num_relations != 2 * self.num_relations:
            raise ValueError(f"graph has {graph.num_relations} relations, want 2|R|")
        if heads.dim() != 1 or heads.shape != rels.shape:
            raise ValueError(f"heads and rels must be [B], got {heads.shape} and {rels.shape}")

    def forward(
        self,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None = None,
        edge_weight: Tensor | None = None,
    ) -> Tensor:
        """Logits float [B, N] of every tail for queries (heads[b], rels[b] in [0, 2|R|))."""
        self._check(graph, heads, rels)
        h, rel = self.encode(graph, edge_mask, edge_weight)  # [N, d], [2|R|, d]
        return (h[heads] * rel[rels]) @ h.t()


class RGCN(_RelationalBase):
    """R-GCN encoder + DistMult (see the module docstring); ``model.num_layers`` layers of
    ``model.hidden_dim``, ``model.num_bases`` bases, ``model.dropout``."""

    def __init__(self, num_nodes: int, num_relations: int, cfg: ModelConfig, ops: OpsConfig):
        super().__init__(num_nodes, num_relations, cfg, ops)
        d, r2 = cfg.hidden_dim, 2 * num_relations
        nb = cfg.num_bases or r2
        self.bases = nn.ParameterList(
            nn.Parameter(torch.randn(nb, d, d) / d**0.5) for _ in range(cfg.num_layers)
        )
        self.coef = nn.ParameterList(
            nn.Parameter(torch.randn(r2, nb) / nb**0.5) for _ in range(cfg.num_layers)
        )
        self.self_loop = nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(cfg.num_layers))
        self.relation = nn.Embedding(r2, d)  # DistMult
        nn.init.xavier_uniform_(self.relation.weight)

    def encode(
        self, graph: Graph, edge_mask: Tensor | None = None, edge_weight: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        kept = _kept(graph, edge_mask)
        dst, r2 = graph.dst(), graph.num_relations
        key = dst * r2 + graph.rel
        count = torch.bincount(key[kept], minlength=graph.num_nodes * r2)
        norm = _times(1.0 / count[key].clamp(min=1).to(self.node.weight.dtype), edge_weight)
        h = self.node.weight
        for i, (bases, coef, loop) in enumerate(
            zip(self.bases, self.coef, self.self_loop, strict=True)
        ):
            agg = self._pass(
                graph, h, (bases, coef), "basis", edge_mask=edge_mask, edge_weight=norm
            )
            h = loop(h) + agg
            if i + 1 < len(self.bases):
                h = self.dropout(torch.relu(h))
        return h, self.relation.weight


class CompGCN(_RelationalBase):
    """CompGCN encoder (multiplicative composition) + DistMult (see the module docstring)."""

    def __init__(self, num_nodes: int, num_relations: int, cfg: ModelConfig, ops: OpsConfig):
        super().__init__(num_nodes, num_relations, cfg, ops)
        d, r2, n = cfg.hidden_dim, 2 * num_relations, cfg.num_layers

        def linears() -> nn.ModuleList:
            return nn.ModuleList(nn.Linear(d, d, bias=False) for _ in range(n))

        self.w_in, self.w_out, self.w_self, self.w_rel = linears(), linears(), linears(), linears()
        self.relation = nn.Embedding(r2 + 1, d)  # 2|R| relations and the self loop (last row)
        nn.init.xavier_uniform_(self.relation.weight)

    def encode(
        self, graph: Graph, edge_mask: Tensor | None = None, edge_weight: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        kept = _kept(graph, edge_mask)
        degree = torch.bincount(graph.dst()[kept], minlength=graph.num_nodes).clamp(min=1)
        inv_sqrt = degree.to(self.node.weight.dtype).rsqrt()
        norm = _times(inv_sqrt[graph.src] * inv_sqrt[graph.dst()], edge_weight)
        forward_edge = graph.rel < self.num_relations
        masks = (kept & forward_edge, kept & ~forward_edge)
        h, z = self.node.weight, self.relation.weight
        for i in range(self.cfg.num_layers):
            rel = z[:-1]
            out_part, in_part = (
                self._pass(graph, h, rel, "mul", edge_mask=m, edge_weight=norm) for m in masks
            )
            agg = self.w_out[i](out_part) + self.w_in[i](in_part) + self.w_self[i](h * z[-1])
            h = self.dropout(torch.tanh(agg / 3))
            z = self.w_rel[i](z)
        return h, z[:-1]
