"""One C-MPNN layer (paper section 4.1; layer norm and shortcut as in section 6.1).

    a_v      = AGG({{ MSG_r(h^(t)_{w|u,q}, z_q) : w in N_r(v), r in R }})          [N, B, A]
    pre_v    = W_0^(t) [h^{f(t)}_{v|u,q} || a_v] + READOUT^(t)({{h^(t)_{w|u,q} : w in V}})
    h^(t+1)_v = ReLU(LN(pre_v)) + h^(t)_v                                          [N, B, d]

f(t) = t or 0 (``history``); LN and the shortcut ``+ h^(t)`` are switchable.  W_0 is a
Linear (d + A) -> d acting on the concatenation (A = d, or 12 d for PNA); it contains the
paper's basic form W_0 (h^{f(t)} + a_v) as the special case W_0 = [W, W], and it is what gives
the paper's parameter counts (its Table "inductive-table-parameterNum").

The same forward runs the dense model (the full graph, states [N, B, d]) and pruned
propagation (:mod:`.pruned`: a packed subgraph of B queries, states [P, 1, d], described by a
:class:`Packing`), where the sent states are scaled by a gate:

    MSG_r(g_w h^(t)_{w|u,q}, z_q)      g_w = 1 (dense) or the priority gate (pruned)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import Graph
from cmpnn_dist.model import aggregations, messages
from cmpnn_dist.model.readout import Readout
from cmpnn_dist.ops import ordered, propagate


@dataclass(frozen=True)
class Packing:
    """A layer's graph is a packed subgraph of B queries (pruned propagation) instead of the
    full graph: its P nodes are (query, node) pairs, its relations ``b * R2 + r`` (the relation
    parameters packed by :meth:`~.messages.MessageFunction.pack`) and the states [P, 1, d].

    Attributes:
        query: int64 [P], the query b of each packed node (it gets query b's readout term).
        batch: B.
        num_nodes: N, nodes of the full graph.
        keys: int64 [M], the (query, node) keys ``b N + v`` of the visited states, and
        visited: float [M, d] those states h^(t), which the readout sums (every other pair is
            at its initial state 0).
        degree: float [N], the full graph's kept in-degrees, or None: an aggregation that
            reads ``raw["log_degree_mean"]`` (PNA's delta) gets the full graph's, as the
            dense layer's.
    """

    query: Tensor
    batch: int
    num_nodes: int
    keys: Tensor
    visited: Tensor
    degree: Tensor | None = None


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
        self.readout = Readout(cfg.readout, dim, cfg.readout_pool, cfg.readout_bias)
        self.norm = ordered.LayerNorm(dim) if cfg.layer_norm else nn.Identity()

    def forward(
        self,
        graph: Graph,
        h: Tensor,
        h_hist: Tensor,
        z_q: Tensor,
        edge_mask: Tensor | None = None,
        node_sets: tuple[Tensor, Tensor] | None = None,
        edge_weight: Tensor | None = None,
        gate: Tensor | None = None,
        packing: Packing | None = None,
    ) -> Tensor:
        """Args:
            graph: message graph (R2 relations), or the packed subgraph of ``packing``.
            h: float [N, B, d], h^(t) ([P, 1, d] packed).
            h_hist: float [N, B, d], h^{f(t)} (h^(t) or h^(0)).
            z_q: float [B, d], query embeddings.
            edge_mask: optional bool [E] keep-mask.
            node_sets: V_q^+ / V_q^- indicators [B, N] each (relation readout only).
            edge_weight: optional float [E] or [B, E] multiplying each edge's message.
            gate: optional float [N, B] ([P, 1]) in h's dtype: each node sends g_w h_w (the
                update still adds the ungated h); None: 1.
            packing: the layout of a packed subgraph (pruned propagation); None: the full
                graph.
        Returns: float [N, B, d] ([P, 1, d]), h^(t+1)."""
        message, relation = self.message(z_q)
        if packing is not None:
            relation = self.message.pack(relation, packing.batch)
        raw = propagate(
            graph,
            h if gate is None else h * gate.unsqueeze(-1),
            relation,
            message=message,
            aggregators=self.aggregate.ops_aggregators,
            edge_mask=edge_mask,
            edge_weight=edge_weight,
            impl=self.ops.impl,
            chunk_elements=self.ops.chunk_elements,
        )
        if packing is not None and packing.degree is not None:
            log_degree = torch.log(packing.degree.to(raw["degree"].dtype) + 1)
            raw["log_degree_mean"] = ordered.mean(log_degree)
        pre = self.aggregate.combine(self.linear, h_hist, raw)
        if packing is None:
            glob = self.readout(h, node_sets)
            if glob is not None:
                pre = pre + glob.unsqueeze(0)
        else:
            glob = self.readout.rows(
                packing.visited, packing.keys, packing.num_nodes, packing.batch, node_sets
            )
            if glob is not None:
                pre = pre + glob.index_select(0, packing.query).unsqueeze(1)
        out = torch.relu(self.norm(pre))
        return out + h if self.shortcut else out
