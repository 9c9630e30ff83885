"""Pruned propagation: the C-MPNN on a learned-priority subgraph per layer (A*Net, Zhu et al.
NeurIPS 2023), for every part of the design space (``model.propagation=pruned``).

Per query b, a *visited* set S_b holds the nodes whose state has left its initial value
(S_b = {u_b} at the start: INIT 1-3 are zero elsewhere).  Each node carries a priority

    p_{v|u,q} = decoder(h_{v|u,q}, z_q)                     (priority=decoder, A*Net: the
                                                             final scorer itself)
    p_{v|u,q} = w_2 ReLU(W_1 [h_{v|u,q} || z_q] + c_1) + c_2  (priority=mlp: a separate MLP)

and layer t (the dense layer itself, :class:`~cmpnn_dist.model.layer.CMPNNLayer`, given the
gate and a :class:`~cmpnn_dist.model.layer.Packing`) runs on the subgraph chosen by it:

    senders   = top-k visited nodes by p,   k = ceil(node_ratio N)  (or max_nodes)
    edges     = top-e out-edges of the senders (kept by edge_mask) by their receiver's p
                (an unvisited receiver: p(0, z_q)),  e = ceil(degree_ratio k E / N) (or max_edges)
    x_w       = g_w h_w,  g = sigmoid(p)                           (sigmoid: A*Net)
                          or g = 1 + (sigmoid(p) - stopgrad(sigmoid(p)))  (straight_through: 1)
    h_v      <- the dense layer's update of v from the messages of the kept edges, for every
                sender and receiver v; AGG degrees are those of the subgraph (PNA's delta: the
                full graph's, as A*Net); READOUT sums the visited states (the others are 0)
    S_b      <- S_b + receivers

With priority=decoder (the default, as A*Net) the priority of a node is its current logit, so
the link-prediction loss trains the priority directly (the gate adds a second path); a
separate MLP (priority=mlp) learns only through the gate.  Unvisited nodes keep their initial
state 0 and so all score ``decoder(0, z_q)``: their ranks follow the evaluation's tie rule
(unvisited=constant, A*Net's); unvisited=relations adds a learned prior on the relations
around each of them (:mod:`.relation_prior`).
States live on visited (query, node) pairs only (:class:`~.pruned_table.Visited`), one packed
graph per layer (keys b N + v, :mod:`.pruned_select`).  This module owns the selection, the
packing and the table; the loop over layers is :class:`~cmpnn_dist.model.cmpnn.CMPNN`'s:

    queries, visited = pruned.start(...)
    for each layer:  step = pruned.step(...);  out = layer(step.graph, step.h, ...);
                     pruned.update(...)
    logits = pruned.logits(...)

The dense model is the limit: when the node budget covers the graph (k >= N), every node is
visited from the start (with its initial state), so every node sends and is updated; with
e >= E every edge is kept, nothing is selected, the sigmoid gate (the default, as A*Net) gives
way to the straight-through one (forward value 1) and the forward pass is the dense one.
INIT 0 is refused (:func:`cmpnn_dist.config.model_conflict`): it has no head indicator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.graph import Graph
from cmpnn_dist.model.decoder import Decoder
from cmpnn_dist.model.layer import Packing
from cmpnn_dist.model.pruned_select import out_order_mask, select_senders, select_subgraph
from cmpnn_dist.model.pruned_table import Visited
from cmpnn_dist.model.relation_prior import RelationPrior
from cmpnn_dist.ops import compiled_cpu


@dataclass(frozen=True)
class Queries:
    """What stays fixed over the layers of one pruned forward of B queries.

    Attributes:
        graph: the message graph (N nodes).
        z_q: float [B, d].  head: float [B, d], h^(0) of each head.  head_keys: int64 [B],
            their keys ``b N + u_b``.
        k, e: senders and edges kept per query and layer (:meth:`PrunedPropagation.budgets`).
        gated: whether the sigmoid gate scales the sent states (sigmoid, unless the budgets
            keep everything: then the straight-through one).
        const: float [B], the priority of a node not visited, p(0, z_q).
        edge_mask: bool [E] keep-mask by edge id, or None; out_mask: the same in out-edge
            order, for the compiled selection (None otherwise).
        pmap: int [B N], scratch of the torch selection.
    """

    graph: Graph
    z_q: Tensor
    head: Tensor
    head_keys: Tensor
    k: int
    e: int
    gated: bool
    const: Tensor
    edge_mask: Tensor | None
    out_mask: Tensor | None
    pmap: Tensor


@dataclass(frozen=True)
class Step:
    """One layer's input on its packed subgraph, and where its output goes.

    Attributes:
        graph: the packed subgraph (P nodes).  h: float [P, 1, d], the packed nodes' states.
        hist: float [P, 1, d], h^{f(t)} of them.  gate: float [P, 1], the senders' gates (1
        for the others).  edge_weight: float [C] per packed edge, or None.  packing: the
        layout (:class:`~cmpnn_dist.model.layer.Packing`).
        rows, new_keys, table: from :meth:`~.pruned_table.Visited.read`.
        senders: S, the number of senders.
    """

    graph: Graph
    h: Tensor
    hist: Tensor
    gate: Tensor
    edge_weight: Tensor | None
    packing: Packing
    rows: Tensor
    new_keys: Tensor
    table: Tensor | None
    senders: int


class PrunedPropagation(nn.Module):
    """Selection, packing and the visited-state table of pruned propagation, and the priority
    MLP (priority=mlp) and unvisited-node prior (unvisited=relations) it owns.

    ``last_stats``: per layer of the last forward, ``(senders, edges, packed nodes)`` summed
    over the batch (ints).  ``compiled_select``: choose senders and edges and pack them with the
    compiled CPU ops (``ops/cpu_select.cpp``) when they are loaded and the graph is on the CPU;
    the same packed graph as the torch path (:func:`~.pruned_select.select_subgraph`).
    With priority=decoder, the methods that score take the model's decoder as an argument."""

    def __init__(self, cfg: ModelConfig, num_relations: int):
        super().__init__()
        dim = cfg.hidden_dim
        self.prune = cfg.prune
        self.history = str(cfg.history)
        self.priority: nn.Module | None = None
        if self.prune.priority == "mlp":
            self.priority = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.unvisited: RelationPrior | None = None
        if self.prune.unvisited == "relations":
            self.unvisited = RelationPrior(num_relations, dim, self.prune.unvisited_hops)
        self.last_stats: list[tuple[int, int, int]] = []
        self.compiled_select = True

    def score(self, h: Tensor, z: Tensor, decoder: Decoder, query: Tensor | None = None) -> Tensor:
        """Priorities float [M] of states h [M, d]: ``decoder(h, z)`` (priority=decoder) or
        ``w_2 ReLU(W_1 [h || z] + c_1) + c_2``; z float [M, d] (one per row), or z_q [B, d]
        with ``query`` int64 [M] (each row's query)."""
        z = z.to(h.dtype)
        if self.priority is None:
            if query is not None:
                return decoder.rows(h, z, query)
            return decoder(h.unsqueeze(1), z).squeeze(1)
        z = z if query is None else z.index_select(0, query)
        return self.priority(torch.cat([h, z], dim=-1)).squeeze(-1)

    def budgets(self, graph: Graph) -> tuple[int, int]:
        """``(k, e)``: nodes and edges kept per layer and query (train or test values)."""
        p, n = self.prune, graph.num_nodes
        test = not self.training
        node_ratio = p.test_node_ratio if test and p.test_node_ratio else p.node_ratio
        degree_ratio = p.test_degree_ratio if test and p.test_degree_ratio else p.degree_ratio
        k = p.max_nodes if p.max_nodes else math.ceil(node_ratio * n - 1e-9)
        k = max(1, min(int(k), n))
        e = p.max_edges if p.max_edges else math.ceil(degree_ratio * k * graph.num_edges / n)
        return k, max(1, int(e))

    def start(
        self,
        graph: Graph,
        heads: Tensor,
        z_q: Tensor,
        head: Tensor,
        edge_mask: Tensor | None,
        decoder: Decoder,
    ) -> tuple[Queries, Visited]:
        """The fixed part and the first visited table of a forward over queries (heads int64
        [B], z_q float [B, d], head = h^(0) of the heads float [B, d]): the heads, or every
        node when the node budget covers the graph (the dense limit)."""
        n, batch = graph.num_nodes, heads.numel()
        k, e = self.budgets(graph)
        head_keys = torch.arange(batch, device=heads.device) * n + heads
        if k >= n:  # every node visited from the start: the dense model
            keys = torch.arange(batch * n, device=heads.device)
            h = z_q.new_zeros(batch * n, z_q.shape[1]).index_put((head_keys,), head)
        else:
            keys, h = head_keys, head
        const = self.score(torch.zeros_like(z_q), z_q, decoder)
        visited = Visited.start(keys, h, self.score(h, z_q, decoder, keys // n), batch * n)
        out_mask = None
        if edge_mask is not None and self._kernel(heads) is not None:  # read in out order
            out_mask = out_order_mask(graph, edge_mask)
        # budgets that keep everything select nothing: no gate scales the sent states
        gated = self.prune.gate == "sigmoid" and not (k >= n and e >= graph.num_edges)
        pmap = torch.empty_like(visited.slot)
        queries = Queries(
            graph, z_q, head, head_keys, k, e, gated, const, edge_mask, out_mask, pmap
        )
        self.last_stats = []
        return queries, visited

    def step(
        self,
        q: Queries,
        visited: Visited,
        edge_weight: Tensor | None = None,
        degree: Tensor | None = None,
    ) -> Step:
        """The next layer's packed subgraph and input: senders = the top-k visited keys of
        each query by priority, their top-e out-edges by the receiver's priority, the gates.
        ``edge_weight``: float [E] or [B, E] (the graph's), ``degree``: the full graph's
        in-degrees for :class:`~cmpnn_dist.model.layer.Packing`."""
        graph, n, batch = q.graph, q.graph.num_nodes, q.z_q.shape[0]
        keys, prio, with_edges = visited.keys, visited.prio, edge_weight is not None
        kernel = self._kernel(keys)
        if kernel is not None:  # selection and packing in one pass per query, no sort
            s_keys = kernel.select_senders(keys, prio, n, batch, q.k)
            node_keys, s_rows, packed, edge = kernel.select_subgraph(
                s_keys, n, batch, graph.out_index(), q.out_mask, visited.slot, prio, q.const,
                q.e, graph.num_relations, with_edges,
            )  # fmt: skip
        else:
            s_keys = select_senders(keys, prio, n, batch, q.k)
            node_keys, s_rows, packed, edge = select_subgraph(
                s_keys, graph, batch, q.edge_mask, visited.slot, prio, q.const, q.e,
                with_edges, q.pmap,
            )  # fmt: skip
        h, rows, new_keys, table = visited.read(node_keys)
        p_b = node_keys // n
        sig = torch.sigmoid(prio.index_select(0, visited.slot.index_select(0, s_keys).long()))
        gate_s = sig if q.gated else 1 + (sig - sig.detach())
        gate = h.new_ones(node_keys.numel()).index_put((s_rows,), gate_s.to(h.dtype))
        if edge_weight is not None:  # the graph's weights of the packed edges
            if edge_weight.dim() == 1:
                edge_weight = edge_weight[edge]
            else:
                edge_weight = edge_weight[p_b[packed.dst()], edge]
        if self.history == "t":
            hist = h = h.unsqueeze(1)  # one tensor: h's gradients add up as the dense layer's
        else:  # h^(0): the head's initial state at the head, 0 elsewhere
            at_head = (node_keys == q.head_keys.index_select(0, p_b)).nonzero().squeeze(1)
            head = q.head.index_select(0, p_b.index_select(0, at_head)).to(h.dtype)
            hist = h.new_zeros(h.shape).index_copy(0, at_head, head).unsqueeze(1)
            h = h.unsqueeze(1)
        packing = Packing(p_b, batch, n, keys, visited.h, degree)
        return Step(
            packed, h, hist, gate.unsqueeze(1), edge_weight, packing, rows, new_keys, table,
            int(s_keys.numel()),
        )  # fmt: skip

    def update(
        self, q: Queries, visited: Visited, step: Step, out: Tensor, decoder: Decoder
    ) -> None:
        """Write the layer's output ``out`` float [P, 1, d] and its priorities into the
        table."""
        out = out.squeeze(1)
        self.last_stats.append((step.senders, step.graph.num_edges, out.shape[0]))
        prio = self.score(out, q.z_q, decoder, step.packing.query)
        visited.write(step.rows, step.new_keys, step.table, out, prio)

    def logits(
        self,
        q: Queries,
        visited: Visited,
        rels: Tensor,
        decoder: Decoder,
    ) -> Tensor:
        """Logits float [B, N]: ``decoder(h, z_q)`` of every visited pair, the unvisited
        ones' score elsewhere (``decoder(0, z_q)``, plus the relation prior with
        unvisited=relations)."""
        n, z_q = q.graph.num_nodes, q.z_q
        batch = z_q.shape[0]
        const = decoder(z_q.new_zeros(batch, 1, z_q.shape[1]), z_q)  # [B, 1]
        if self.priority is None:  # prio = decoder(h, z_q) of every visited row's latest state
            scores = visited.prio
        else:
            scores = decoder.rows(visited.h, z_q.to(visited.h.dtype), visited.keys // n)
        if self.unvisited is None:  # unvisited=constant: all tie at decoder(0, z_q)
            flat = const.repeat(1, n).reshape(-1).to(scores.dtype)
        else:  # unvisited=relations: plus the prior on the relations around each node (also
            # when every node is visited and it is all overwritten: DDP wants its gradient)
            prior = self.unvisited(q.graph, rels, q.edge_mask)
            flat = (const.to(prior.dtype) + prior).reshape(-1).to(scores.dtype)
        return flat.index_put((visited.keys,), scores).view(batch, n)

    def _kernel(self, like: Tensor) -> ModuleType | None:
        """The compiled selection (:func:`~cmpnn_dist.ops.compiled_cpu`) for tensors on
        ``like``'s device, or None (the torch path)."""
        if self.compiled_select and like.device.type == "cpu":
            return compiled_cpu()
        return None


def in_degrees(graph: Graph, edge_mask: Tensor | None) -> Tensor:
    """float [N]: the graph's kept in-degrees (PNA's delta over the full graph)."""
    if edge_mask is None:
        return (graph.indptr[1:] - graph.indptr[:-1]).float()
    return torch.bincount(graph.dst()[edge_mask], minlength=graph.num_nodes).float()
