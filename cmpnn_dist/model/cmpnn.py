"""The conditional message passing neural network (paper section 4, appendix E).

For B queries (u_b, q_b) at once, with R2 = 2|R| relations (inverses included):

    z_q              = Embedding(R2, d)[q]                                   [B, d]
    h^(0)            = INIT(u, v, q)                                         [N, B, d]
    h^(t+1)          = layer_t(h^(t), h^{f(t)}, z_q)     t = 0 .. T-1        [N, B, d]
    logit(v | u, q)  = MLP([h^(T)_{v|u,q} || z_q])                           [B, N]
                       (+ W[q] . e_v with model.prior=relations: :mod:`.relation_prior`)

so one forward pass scores every candidate tail v.  Head prediction is tail prediction with
the inverse relation q + |R|.  See :mod:`.init`, :mod:`.messages`, :mod:`.aggregations`,
:mod:`.readout`, :mod:`.layer` and :mod:`.decoder` for each component's equation.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig, OpsConfig, check_model
from cmpnn_dist.graph import Graph
from cmpnn_dist.model.decoder import Decoder
from cmpnn_dist.model.init import head_states, initial_states
from cmpnn_dist.model.layer import CMPNNLayer
from cmpnn_dist.model.readout import relation_node_sets


class CMPNN(nn.Module):
    """C-MPNN over a graph with ``num_relations`` = |R| original relations.

    Attributes: ``query`` (z_q embedding over 2|R| query relations), ``layers``
    (``num_layers`` :class:`CMPNNLayer`), ``decoder`` (:class:`Decoder`), ``prior``
    (:class:`~.relation_prior.RelationPrior` with model.prior=relations, else None).
    """

    def __init__(self, cfg: ModelConfig, num_relations: int, ops: OpsConfig | None = None):
        super().__init__()
        check_model(cfg)  # the schema's choices and bounds, the model section's joint rules
        if num_relations < 1:
            raise ValueError(f"num_relations must be >= 1, got {num_relations}")
        self.cfg = cfg
        self.ops = ops if ops is not None else OpsConfig()
        self.num_relations = int(num_relations)
        r2 = 2 * self.num_relations
        dim = cfg.hidden_dim
        self.query = nn.Embedding(r2, dim)
        self.layers = nn.ModuleList(CMPNNLayer(cfg, r2, self.ops) for _ in range(cfg.num_layers))
        self.decoder = Decoder(dim, cfg.decoder_hidden_dim)
        self.prior = None  # model.prior=relations: W[q] . e_v added to every logit
        if cfg.prior == "relations":
            from cmpnn_dist.model.relation_prior import RelationPrior

            self.prior = RelationPrior(r2, dim, cfg.prior_hops)
        self.pruned = None  # model.propagation=pruned: selection, packing, visited table
        if cfg.propagation == "pruned":
            from cmpnn_dist.model.pruned import PrunedPropagation

            self.pruned = PrunedPropagation(cfg, r2)

    def _check(self, graph: Graph, heads: Tensor, rels: Tensor) -> None:
        if graph.num_relations != 2 * self.num_relations:
            raise ValueError(
                f"graph has {graph.num_relations} edge relations but the model was built for "
                f"|R|={self.num_relations} (expects 2|R|={2 * self.num_relations} with inverses)"
            )
        if heads.dim() != 1 or heads.shape != rels.shape:
            raise ValueError(f"heads and rels must be [B], got {heads.shape} and {rels.shape}")

    def _queries(
        self, graph: Graph, heads: Tensor, rels: Tensor, edge_mask: Tensor | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor] | None]:
        """``(z_q float [B, d], node_sets)`` of a batch (arguments checked): the node sets
        V_q^+ / V_q^- for the relation readout, else None."""
        self._check(graph, heads, rels)
        node_sets = None
        if self.cfg.readout == "relation":
            node_sets = relation_node_sets(graph, rels, edge_mask)
        return self.query(rels), node_sets

    def encode(
        self,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None = None,
        edge_weight: Tensor | Sequence[Tensor] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Returns ``(h^(T) float [N, B, d], z_q float [B, d])``; arguments as :meth:`forward`,
        where ``edge_weight`` may also be a list of one weight tensor per layer (layer t
        scales its messages by ``edge_weight[t]``: per-layer path explanations)."""
        z_q, node_sets = self._queries(graph, heads, rels, edge_mask)
        h0 = initial_states(self.cfg.init, heads, z_q, graph.num_nodes, self.cfg.init_noise)
        h = h0
        weights = _per_layer(edge_weight, len(self.layers))
        for layer, weight in zip(self.layers, weights, strict=True):
            hist = h if str(self.cfg.history) == "t" else h0
            h = layer(graph, h, hist, z_q, edge_mask, node_sets, weight)
        return h, z_q

    def node_states(
        self,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None = None,
        edge_weight: Tensor | None = None,
    ) -> Tensor:
        """Final pair representations h^(T)_{v|u_b,q_b}: float [B, N, d]."""
        return self.encode(graph, heads, rels, edge_mask, edge_weight)[0].transpose(0, 1)

    def forward(
        self,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None = None,
        edge_weight: Tensor | Sequence[Tensor] | None = None,
    ) -> Tensor:
        """Scores of every tail v for each query (u_b = heads[b], q_b = rels[b] in [0, 2|R|)).

        Args:
            graph: message graph with 2|R| relations.
            heads: int64 [B].  rels: int64 [B].
            edge_mask: optional bool [E] keep-mask shared by the batch (query-edge removal).
            edge_weight: optional float [E] (shared) or [B, E] (per query): every layer
                multiplies each edge's message by its weight before aggregating (see
                :func:`cmpnn_dist.ops.propagate`); the logits are differentiable in it, which
                is what gradient-based path explanations use.  ``None`` = all ones; a list
                of one tensor per layer weights each layer separately.
        Returns: logits float [B, N].
        """
        if self.pruned is not None:  # model.propagation=pruned (cmpnn_dist.model.pruned)
            logits = self._pruned_logits(graph, heads, rels, edge_mask, edge_weight)
        else:
            h, z_q = self.encode(graph, heads, rels, edge_mask, edge_weight)
            logits = self.decoder(h.transpose(0, 1), z_q)
        if self.prior is not None:  # the query pair's removed edges are not counted
            logits = logits + self.prior(graph, rels, edge_mask).to(logits.dtype)
        return logits

    def _pruned_logits(
        self,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None,
        edge_weight: Tensor | Sequence[Tensor] | None,
    ) -> Tensor:
        """:meth:`forward`'s logits with model.propagation=pruned: each layer on the packed
        subgraph that :class:`~.pruned.PrunedPropagation` selects from the visited states."""
        from cmpnn_dist.model.pruned import in_degrees

        z_q, node_sets = self._queries(graph, heads, rels, edge_mask)
        head = head_states(self.cfg.init, z_q)
        degree = None
        if any(layer.aggregate.graph_degrees for layer in self.layers):
            degree = in_degrees(graph, edge_mask)
        pruned = self.pruned
        queries, visited = pruned.start(graph, heads, z_q, head, edge_mask, self.decoder)
        weights = _per_layer(edge_weight, len(self.layers))
        for layer, weight in zip(self.layers, weights, strict=True):
            step = pruned.step(queries, visited, weight, degree)
            out = layer(
                step.graph, step.h, step.hist, z_q, None, node_sets, step.edge_weight,
                step.gate, step.packing,
            )  # fmt: skip
            pruned.update(queries, visited, step, out, self.decoder)
        return pruned.logits(queries, visited, rels, self.decoder)


def _per_layer(
    edge_weight: Tensor | Sequence[Tensor] | None, num_layers: int
) -> list[Tensor | None]:
    """One edge-weight argument per layer: the same tensor (or None) for all, or the list's."""
    if isinstance(edge_weight, list | tuple):
        if len(edge_weight) != num_layers:
            raise ValueError(f"{num_layers} layers but {len(edge_weight)} weight tensors")
        return list(edge_weight)
    return [edge_weight] * num_layers
