"""Pruned propagation: the C-MPNN on a learned-priority subgraph per layer (A*Net, Zhu et al.
NeurIPS 2023), for every part of the design space (``model.propagation=pruned``).

Per query b, a *visited* set S_b holds the nodes whose state has left its initial value
(S_b = {u_b} at the start: INIT 1-3 are zero elsewhere).  Each node carries a priority

    p_{v|u,q} = decoder(h_{v|u,q}, z_q)                     (priority=decoder, A*Net: the
                                                             final scorer itself)
    p_{v|u,q} = w_2 ReLU(W_1 [h_{v|u,q} || z_q] + c_1) + c_2  (priority=mlp: a separate MLP)

and layer t (the dense layer's parameters, :class:`~cmpnn_dist.model.layer.CMPNNLayer`) runs on
the subgraph chosen by it:

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
States live on visited (query, node) pairs only, one packed graph per layer (keys b N + v,
:mod:`.pruned_select`) through the same ``ops.propagate``.

The dense model is the limit: when the node budget covers the graph (k >= N), every node is
visited from the start (with its initial state), so every node sends and is updated; with
e >= E every edge is kept, nothing is selected, the sigmoid gate (the default, as A*Net) gives
way to the straight-through one (forward value 1) and the forward pass is the dense one.
INIT 0 is refused: it has no head indicator to start from.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.graph import Graph
from cmpnn_dist.model.pruned_select import (
    out_edges,
    out_index,
    out_order_mask,
    pack_graph,
    pack_relation,
    segment_topk,
)
from cmpnn_dist.model.pruned_table import merge_rows, read_rows, split_rows, write_rows
from cmpnn_dist.model.readout import relation_node_sets
from cmpnn_dist.model.relation_prior import RelationPrior
from cmpnn_dist.ops import compiled_cpu, propagate


def check_prune_config(cfg: ModelConfig) -> None:
    """Raise ValueError when ``cfg`` cannot run pruned (INIT 0)."""
    if int(cfg.init) == 0:
        raise ValueError(
            "model.propagation=pruned needs model.init 1-3: INIT 0 has no head indicator "
            "to start from"
        )


class PrunedPropagation(nn.Module):
    """The priority and the pruned forward of a :class:`~cmpnn_dist.model.CMPNN`.

    ``last_stats``: per layer of the last forward, ``(senders, edges, packed nodes)`` summed
    over the batch (ints).  ``compiled_select``: choose senders and edges and pack them with the
    compiled CPU ops (``ops/cpu_select.cpp``: a histogram cut and a counting sort per query
    instead of sorting every candidate and the packed edges) when they are loaded and the
    graph is on the CPU; the same packed graph as the torch path.
    ``decoder``: the model's decoder (priority=decoder), kept as a plain attribute (not a
    submodule: its parameters are the model's)."""

    def __init__(
        self, cfg: ModelConfig, decoder: nn.Module | None = None, num_relations: int | None = None
    ):
        super().__init__()
        check_prune_config(cfg)
        dim = cfg.hidden_dim
        self.prune = cfg.prune
        self.init_kind = int(cfg.init)
        self.history = str(cfg.history)
        self.priority: nn.Module | None = None
        if self.prune.priority == "mlp":
            self.priority = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        elif decoder is None:
            raise ValueError("model.prune.priority=decoder needs the model's decoder")
        object.__setattr__(self, "decoder", decoder)
        self.unvisited: RelationPrior | None = None
        if self.prune.unvisited == "relations":
            if num_relations is None:
                raise ValueError("model.prune.unvisited=relations needs the number of relations")
            self.unvisited = RelationPrior(num_relations, dim, self.prune.unvisited_hops)
        self.last_stats: list[tuple[int, int, int]] = []
        self.compiled_select = True

    def score(self, h: Tensor, z: Tensor, query: Tensor | None = None) -> Tensor:
        """Priorities float [M] of states h [M, d]: ``decoder(h, z)`` (priority=decoder) or
        ``w_2 ReLU(W_1 [h || z] + c_1) + c_2``; z float [M, d] (one per row), or z_q [B, d]
        with ``query`` int64 [M] (each row's query)."""
        z = z.to(h.dtype)
        if self.priority is None:
            if query is not None:
                return self.decoder.rows(h, z, query)
            return self.decoder(h.unsqueeze(1), z).squeeze(1)
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

    def head_states(self, z_q: Tensor) -> Tensor:
        """h^(0)_{u|u,q} float [B, d] (the draws of :func:`~.init.initial_states`)."""
        if self.init_kind == 1:
            return torch.ones_like(z_q)
        if self.init_kind == 2:
            return z_q
        return z_q + torch.randn_like(z_q)

    def forward(
        self,
        model: nn.Module,
        graph: Graph,
        heads: Tensor,
        rels: Tensor,
        edge_mask: Tensor | None = None,
        edge_weight: Tensor | None = None,
        layer_weights: list[Tensor] | None = None,
    ) -> Tensor:
        """Logits float [B, N] of ``model`` (a CMPNN) pruned; arguments as ``CMPNN.forward``;
        ``layer_weights``: one edge_weight per layer instead (path explanations)."""
        model._check(graph, heads, rels)
        if self.priority is None:  # the model's own decoder (also after a deepcopy)
            object.__setattr__(self, "decoder", model.decoder)
        n, batch = graph.num_nodes, heads.numel()
        z_q = model.query(rels)
        head = self.head_states(z_q)
        k, e = self.budgets(graph)
        qidx = torch.arange(batch, device=heads.device)
        head_keys = qidx * n + heads
        if k >= n:  # every node visited from the start: the dense model
            keys = torch.arange(batch * n, device=heads.device)
            h = z_q.new_zeros(batch * n, z_q.shape[1]).index_put((head_keys,), head)
        else:
            keys, h = head_keys, head
        slot_dtype = torch.int32 if batch * n < 2**31 - 1 else torch.long
        slot = torch.full((batch * n,), -1, dtype=slot_dtype, device=heads.device)
        slot[keys] = torch.arange(keys.numel(), device=heads.device, dtype=slot_dtype)
        ctx = {
            "graph": graph,
            "n": n,
            "batch": batch,
            "k": k,
            # budgets that keep everything select nothing: no gate scales the sent states
            "gated": self.prune.gate == "sigmoid" and not (k >= n and e >= graph.num_edges),
            "e": e,
            "z_q": z_q,
            "head": head,
            "head_keys": head_keys,
            "edge_mask": edge_mask,
            "edge_weight": edge_weight,
            "const": self.score(torch.zeros_like(z_q), z_q),
            "node_sets": None,
            "delta": None,
            "slot": slot,  # row of each visited (query, node) key in h / prio, else -1
            "pmap": torch.empty_like(slot),  # torch path: row of each packed key
        }
        if model.cfg.readout == "relation":
            ctx["node_sets"] = relation_node_sets(graph, rels, edge_mask)
        if model.cfg.aggregate == "pna":
            ctx["delta"] = _in_degrees(graph, edge_mask)
        prio = self.score(h, z_q, keys // n)
        self.last_stats = []
        for t, layer in enumerate(model.layers):
            if layer_weights is not None:
                ctx["edge_weight"] = layer_weights[t]
            keys, h, prio = self._layer(layer, ctx, keys, h, prio)
        const = model.decoder(z_q.new_zeros(batch, 1, z_q.shape[1]), z_q)  # [B, 1]
        if self.priority is None:  # prio = decoder(h, z_q) of every visited row's latest state
            visited = prio
        else:
            visited = model.decoder.rows(h, z_q.to(h.dtype), keys // n)
        if self.unvisited is None:  # unvisited=constant: all tie at decoder(0, z_q)
            flat = const.repeat(1, n).reshape(-1).to(visited.dtype)
        else:  # unvisited=relations: plus the prior on the relations around each node (also
            # when every node is visited and it is all overwritten: DDP wants its gradient)
            prior = self.unvisited(graph, rels, edge_mask)
            flat = (const.to(prior.dtype) + prior).reshape(-1).to(visited.dtype)
        return flat.index_put((keys,), visited).view(batch, n)

    def _subgraph(
        self, ctx: dict, keys: Tensor, prio: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Graph, Tensor | None]:
        """The packed subgraph of one layer: ``(s_keys [S], node_keys [P], s_rows [S], packed,
        edge [C] or None)``: the senders' (query, node) keys; the sorted keys of the senders and
        receivers (the packed rows); each sender's row; the receiver-sorted packed graph
        (relation ``b * R2 + r``; within a row, edges by sender key, then edge id); the graph's
        id of each packed edge (only when ``ctx["edge_weight"]`` is set)."""
        graph, n, batch = ctx["graph"], ctx["n"], ctx["batch"]
        r2, with_edges = graph.num_relations, ctx["edge_weight"] is not None
        kernel = compiled_cpu() if self.compiled_select and keys.device.type == "cpu" else None
        if kernel is not None:  # selection and packing in one pass per query, no sort
            s_keys = kernel.select_senders(keys, prio, n, batch, ctx["k"])
            if ctx["edge_mask"] is not None and "out_mask" not in ctx:  # read in out order
                ctx["out_mask"] = out_order_mask(graph, ctx["edge_mask"])
            return s_keys, *kernel.select_subgraph(
                s_keys, n, batch, out_index(graph), ctx.get("out_mask"), ctx["slot"], prio,
                ctx["const"], ctx["e"], r2, with_edges,
            )  # fmt: skip
        b_of = keys // n
        send = segment_topk(prio, b_of, ctx["k"], batch).nonzero().squeeze(1)
        s_keys = torch.sort(keys[send]).values  # by key: edge ties go to the smaller node id
        s_b = s_keys // n
        owner, pos = out_edges(graph, s_keys - s_b * n)
        _, out_edge, out_dst, out_rel = out_index(graph)

        def take(idx: Tensor, *arrays: Tensor) -> list[Tensor]:
            return [a.index_select(0, idx) for a in arrays]

        edge = out_edge.index_select(0, pos)
        if ctx["edge_mask"] is not None:
            kept = ctx["edge_mask"].index_select(0, edge).nonzero().squeeze(1)
            owner, pos, edge = take(kept, owner, pos, edge)
        e_b = s_b.index_select(0, owner)
        r_keys = e_b * n + out_dst.index_select(0, pos)
        if edge.numel() and bool((torch.bincount(e_b, minlength=batch) > ctx["e"]).any()):
            rows = ctx["slot"].index_select(0, r_keys).long()
            known = prio.detach().index_select(0, rows.clamp(min=0))
            r_prio = torch.where(rows >= 0, known, ctx["const"].detach().index_select(0, e_b))
            keep = segment_topk(r_prio, e_b, ctx["e"], batch).nonzero().squeeze(1)
            owner, pos, edge, e_b, r_keys = take(keep, owner, pos, edge, e_b, r_keys)
        rel = e_b * r2 + out_rel.index_select(0, pos)
        mark = torch.zeros(batch * n, dtype=torch.bool, device=keys.device)
        mark[s_keys] = True
        mark[r_keys] = True
        node_keys = mark.nonzero().squeeze(1)  # sorted (query, node) keys of the subgraph
        pmap = ctx["pmap"]
        pmap[node_keys] = torch.arange(node_keys.numel(), device=keys.device, dtype=pmap.dtype)
        s_rows = pmap[s_keys].long()
        packed, order = pack_graph(
            node_keys.numel(),
            s_rows.index_select(0, owner),
            pmap.index_select(0, r_keys).long(),
            rel,
            batch * r2,
        )
        return s_keys, node_keys, s_rows, packed, edge[order] if with_edges else None

    def _layer(
        self, layer: nn.Module, ctx: dict, keys: Tensor, h: Tensor, prio: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One pruned layer: ``(keys [M], h [M, d], prio [M])`` -> the same after it (rows in
        order of first visit; ``ctx["slot"]`` maps keys to rows)."""
        n, batch, z_q = ctx["n"], ctx["batch"], ctx["z_q"]
        slot, r2 = ctx["slot"], ctx["graph"].num_relations
        s_keys, node_keys, s_rows, packed, edge = self._subgraph(ctx, keys, prio)
        num = node_keys.numel()
        rows = slot[node_keys].long()
        found = rows >= 0
        m, new = keys.numel(), ~found
        new_keys = node_keys[new]
        size = m + new_keys.numel()
        # the visited rows read (0 for the new ones); with autograd, together with the table
        # they are cleared from (pruned_table: its backward writes each row's gradient once,
        # not autograd's accumulating index_put of h[rows.clamp(min=0)], whose clamped rows
        # all hit row 0: on CUDA 80 % of a training step in its duplicate-serialising kernel)
        table = None
        if torch.is_grad_enabled():
            h_p, table = split_rows(h, rows, size)
        else:
            h_p = read_rows(h, rows)
        p_b = node_keys // n
        sig = torch.sigmoid(prio.index_select(0, slot.index_select(0, s_keys).long()))
        gate_s = sig if ctx["gated"] else 1 + (sig - sig.detach())
        gate = h_p.new_ones(num).index_put((s_rows,), gate_s.to(h_p.dtype))
        message, relation = layer.message(z_q)
        weight = ctx["edge_weight"]
        if weight is not None:  # the graph's weights of the packed edges
            weight = weight[edge] if weight.dim() == 1 else weight[p_b[packed.dst()], edge]
        raw = propagate(
            packed,
            (h_p * gate.unsqueeze(1)).unsqueeze(1),
            pack_relation(message, relation, batch, r2),
            message=message,
            aggregators=layer.aggregate.ops_aggregators,
            edge_weight=weight,
            impl=layer.ops.impl,
            chunk_elements=layer.ops.chunk_elements,
        )
        if ctx["delta"] is not None:  # PNA's delta over the full graph, as the dense layer's
            raw["log_degree_mean"] = torch.log(ctx["delta"].to(raw["degree"].dtype) + 1).mean()
        if self.history == "t":
            hist = h_p
        else:
            at_head = (node_keys == ctx["head_keys"].index_select(0, p_b)).nonzero().squeeze(1)
            head = ctx["head"].index_select(0, p_b.index_select(0, at_head)).to(h_p.dtype)
            hist = h_p.new_zeros(h_p.shape).index_copy(0, at_head, head)
        pre = layer._combine(hist.unsqueeze(1), raw)  # [P, 1, d]
        glob = _readout(layer.readout, ctx["node_sets"], keys, keys // n, h, batch)
        if glob is not None:
            pre = pre + glob.index_select(0, p_b).unsqueeze(1)
        out = torch.relu(layer.norm(pre)).squeeze(1)
        if layer.shortcut:
            out = out + h_p
        self.last_stats.append((int(s_keys.numel()), packed.num_edges, num))
        new_prio = self.score(out, z_q, p_b)
        # merge: updated rows written, new rows appended (in place without autograd)
        rows = torch.where(found, rows, m + torch.cumsum(new, 0) - 1)
        slot[new_keys] = torch.arange(m, size, device=slot.device).to(slot.dtype)
        if table is None:
            h = merge_rows(ctx, "h", h, rows, out, size)
        else:  # the rows read and cleared by split_rows, and the appended ones
            h = write_rows(table.to(out.dtype), rows, out)
        prio = merge_rows(ctx, "prio", prio, rows, new_prio, size)
        return torch.cat([keys, new_keys]), h, prio


def _in_degrees(graph: Graph, edge_mask: Tensor | None) -> Tensor:
    """float [N]: the full graph's kept in-degrees (PNA's delta, as the dense layer's)."""
    if edge_mask is None:
        return (graph.indptr[1:] - graph.indptr[:-1]).float()
    return torch.bincount(graph.dst()[edge_mask], minlength=graph.num_nodes).float()


def _readout(
    readout: nn.Module,
    node_sets: tuple[Tensor, Tensor] | None,
    keys: Tensor,
    b_of: Tensor,
    h: Tensor,
    batch: int,
) -> Tensor | None:
    """READOUT^(t) float [B, d] over the visited states (the unvisited ones are 0)."""
    if readout.kind == "none":
        return None

    def total(weight: Tensor | None) -> Tensor:
        x = h if weight is None else h * weight.to(h.dtype).unsqueeze(1)
        return h.new_zeros(batch, h.shape[1]).index_add(0, b_of, x)

    if readout.kind == "sum":
        return readout.w1(total(None))
    incoming, outgoing = (s.reshape(-1)[keys] for s in node_sets)
    return readout.w1(total(incoming)) + readout.w2(total(outgoing))
