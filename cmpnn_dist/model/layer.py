"""One C-MPNN layer (paper section 4.1; layer norm and shortcut as in section 6.1).

    a_v      = AGG({{ MSG_r(h^(t)_{w|u,q}, z_q) : w in N_r(v), r in R }})          [N, B, A]
    pre_v    = W_0^(t) [h^{f(t)}_{v|u,q} || a_v] + READOUT^(t)({{h^(t)_{w|u,q} : w in V}})
    h^(t+1)_v = ReLU(LN(pre_v)) + h^(t)_v                                          [N, B, d]

f(t) = t or 0 (``history``); LN and the shortcut ``+ h^(t)`` are switchable.  W_0 is a
Linear (d + A) -> d acting on the concatenation (A = d, or 12 d for PNA); it contains the
paper's basic form W_0 (h^{f(t)} + a_v) as the special case W_0 = [W, W], and it is what gives
the paper's parameter counts (its Table "inductive-table-parameterNum").
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import Graph
from cmpnn_dist.model import aggregations, messages
from cmpnn_dist.model.readout import Readout
from cmpnn_dist.ops import propagate


class CMPNNLayer(nn.Module):
    """Layer t: message ``message``, aggregation ``aggregate``, W_0 ``linear``, ``readout``,
    ``norm`` (LayerNorm(d) or identity); ``shortcut`` adds h^(t)."""

    def __init__(self, cfg: ModelConfig, num_relations: int, ops: OpsConfig):
        super().__init__()
        dim = cfg.hidden_dim
        self.ops = ops
        self.shortcut = bool(cfg.shortcut)
        self.message = messages.build(cfg.message, num_relations, dim, cfg)
        self.aggregate = aggregations.build(cfg.aggregate)
        self.linear = nn.Linear(dim + self.aggregate.out_dim(dim), dim)
        self.readout = Readout(cfg.readout, dim)
        self.norm = nn.LayerNorm(dim) if cfg.layer_norm else nn.Identity()

    def forward(
        self,
        graph: Graph,
        h: Tensor,
        h_hist: Tensor,
        z_q: Tensor,
        edge_mask: Tensor | None = None,
        node_sets: tuple[Tensor, Tensor] | None = None,
        edge_weight: Tensor | None = None,
    ) -> Tensor:
        """Args:
            graph: message graph (R2 relations).
            h: float [N, B, d], h^(t).
            h_hist: float [N, B, d], h^{f(t)} (h^(t) or h^(0)).
            z_q: float [B, d], query embeddings.
            edge_mask: optional bool [E] keep-mask.
            node_sets: V_q^+ / V_q^- indicators [B, N] each (relation readout only).
            edge_weight: optional float [E] or [B, E] multiplying each edge's message.
        Returns: float [N, B, d], h^(t+1)."""
        message, relation = self.message(z_q)
        raw = propagate(
            graph,
            h,
            relation,
            message=message,
            aggregators=self.aggregate.ops_aggregators,
            edge_mask=edge_mask,
            edge_weight=edge_weight,
            impl=self.ops.impl,
            chunk_elements=self.ops.chunk_elements,
        )
        pre = self._combine(h_hist, raw)
        glob = self.readout(h, node_sets)
        if glob is not None:
            pre = pre + glob.unsqueeze(0)
        out = torch.relu(self.norm(pre))
        return out + h if self.shortcut else out

    def _combine(self, h_hist: Tensor, raw: dict[str, Tensor]) -> Tensor:
        """W_0 [h^{f(t)} || a_v] + bias, float [N, B, d] (the aggregation's ``combine``: PNA
        never builds its 12d input)."""
        return self.aggregate.combine(self.linear, h_hist, raw)
