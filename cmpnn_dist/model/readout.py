"""READOUT: the global term of a layer (paper section 4.1 and the readout experiment, 6.3).

    none:      READOUT = 0
    sum:       READOUT^(t) = W_1^(t) sum_{w in V} h^(t)_{w|u,q}
    relation:  READOUT^(t) = W_1^(t) sum_{w in V_q^+} h^(t)_{w|u,q}
                           + W_2^(t) sum_{w in V_q^-} h^(t)_{w|u,q}

V_q^+ = nodes with an incoming q-edge, V_q^- = nodes with an outgoing q-edge, q the query
relation of each query (an inverse id when predicting heads), computed on the kept edges
(``edge_mask``).  The readout is one vector per query ([B, d]) added to every node's
pre-activation.  W_1, W_2: Linear d -> d, without bias by default (the paper's equations);
``bias=True`` adds one b_1, b_2 each.  ``pool="mean"`` divides each sum by N, the number of
nodes of the graph: the paper's code (HxyScotthuang/CMPNN ``cmpnn/layer.py``: ``combine`` and
``calculate_read_out`` with ``readout_type: mean``, whose masked ``.mean(dim=0)`` runs over all
N nodes; its ``nn.Linear`` have a bias).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import Readout, ReadoutPool, choices
from cmpnn_dist.graph import Graph

READOUT_KINDS = choices(Readout)  # the one list: cmpnn_dist.config
READOUT_POOLS = choices(ReadoutPool)


def relation_node_sets(
    graph: Graph, rels: Tensor, edge_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Indicators of V_q^+ and V_q^- for each query relation.

    Args:
        graph: the message graph (inverse edges included).
        rels: int64 [B] query relations in [0, R2).
        edge_mask: optional bool [E] keep-mask.

    Returns:
        ``(incoming [B, N], outgoing [B, N])`` float 0/1: ``incoming[b, w] = 1`` iff some kept
        edge ``x -rels[b]-> w`` exists, ``outgoing[b, w] = 1`` iff some kept ``w -rels[b]-> x``.
    """
    unique, inverse = torch.unique(rels, return_inverse=True)
    slot = torch.full((graph.num_relations,), -1, dtype=torch.long, device=rels.device)
    slot[unique] = torch.arange(unique.numel(), device=rels.device)
    edge_slot = slot[graph.rel]
    keep = edge_slot >= 0
    if edge_mask is not None:
        keep &= edge_mask
    sets = []
    for nodes in (graph.dst(), graph.src):
        ind = torch.zeros(unique.numel(), graph.num_nodes, device=rels.device)
        ind[edge_slot[keep], nodes[keep]] = 1.0
        sets.append(ind[inverse])
    return sets[0], sets[1]


class Readout(nn.Module):
    """Global readout of one layer; ``kind`` in none | sum | relation; ``pool`` sum | mean
    (the sums / N); ``bias``: W_1, W_2 with a bias."""

    def __init__(self, kind: str, dim: int, pool: str = "sum", bias: bool = False):
        super().__init__()
        if kind not in READOUT_KINDS:
            raise ValueError(f"unknown model.readout {kind!r}; choices: {READOUT_KINDS}")
        if pool not in READOUT_POOLS:
            raise ValueError(f"unknown model.readout_pool {pool!r}; choices: {READOUT_POOLS}")
        self.kind, self.pool = kind, pool
        if kind != "none":
            self.w1 = nn.Linear(dim, dim, bias=bias)
        if kind == "relation":
            self.w2 = nn.Linear(dim, dim, bias=bias)

    def _pooled(self, total: Tensor, num_nodes: int) -> Tensor:
        return total / num_nodes if self.pool == "mean" else total

    def forward(self, h: Tensor, node_sets: tuple[Tensor, Tensor] | None) -> Tensor | None:
        """Args: h float [N, B, d]; node_sets from :func:`relation_node_sets` (relation only).
        Returns: float [B, d], or None for ``none``."""
        if self.kind == "none":
            return None
        n = h.shape[0]
        if self.kind == "sum":
            return self.w1(self._pooled(h.sum(0), n))
        incoming, outgoing = node_sets
        into = torch.einsum("bn,nbd->bd", incoming.to(h.dtype), h)
        out_of = torch.einsum("bn,nbd->bd", outgoing.to(h.dtype), h)
        return self.w1(self._pooled(into, n)) + self.w2(self._pooled(out_of, n))

    def rows(
        self,
        h: Tensor,
        keys: Tensor,
        num_nodes: int,
        batch: int,
        node_sets: tuple[Tensor, Tensor] | None,
    ) -> Tensor | None:
        """The same readout over M (query, node) rows, the nodes absent from them at state 0
        (pruned propagation's visited states).

        Args: h float [M, d]; keys int64 [M], ``b * num_nodes + v`` of each row; batch: B;
        node_sets as :meth:`forward` ([B, N] each; relation only).
        Returns: float [B, d], or None for ``none``."""
        if self.kind == "none":
            return None
        query = keys // num_nodes

        def total(weight: Tensor | None) -> Tensor:
            x = h if weight is None else h * weight.to(h.dtype).unsqueeze(1)
            return self._pooled(h.new_zeros(batch, h.shape[1]).index_add(0, query, x), num_nodes)

        if self.kind == "sum":
            return self.w1(total(None))
        incoming, outgoing = (s.reshape(-1)[keys] for s in node_sets)
        return self.w1(total(incoming)) + self.w2(total(outgoing))
