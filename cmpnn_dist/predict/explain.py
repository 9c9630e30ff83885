"""Path explanations of one prediction from edge-weight gradients (NBFNet, Zhu et al. 2021).

For the query ``(u, q, ?)`` and the answer v, every layer t = 0 .. T-1 gets its own edge
weights ``w^(t) in R^|E|`` scaling the messages (``m_e <- w^(t)_e m_e``, all ones = the
trained model).  The importance of edge e at layer t is the gradient of the answer's logit,

    g^(t)_e = d logit(v | u, q) / d w^(t)_e   at w = 1,

and the importance of a path ``u = x_0 -e_1-> x_1 ... -e_L-> x_L = v`` (L <= T) whose l-th
edge carries the message at layer t_l is the mean ``(1/L) sum_l g^(t_l)_{e_l}``.  NBFNet
takes t_l = l - 1 (``wait=False``).  A C-MPNN layer keeps its input state (the
``W_0 h^{f(t)}`` history term and the shortcut), so a message can also wait at a node: by
default (``wait=True``) any t_1 < t_2 < ... < t_L is allowed and a path counts with its
best layer assignment.  The k best paths come from a beam search over (layer, node, path
length) states keeping the ``beam`` best partial paths (summed importance) of each; paths
stop at v (edges out of v are not followed).  Paths of every length 1..T that reach v are
ranked by mean importance.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from cmpnn_dist.cli import UsageError
from cmpnn_dist.graph import Graph


def supports_edge_weight(model: nn.Module) -> bool:
    """True for a C-MPNN whose layers take per-edge weights (``edge_weight=``)."""
    from cmpnn_dist.model.cmpnn import CMPNN

    if not isinstance(model, CMPNN):
        return False
    layers = getattr(model, "layers", None)
    if not layers:
        return False
    return "edge_weight" in inspect.signature(layers[0].forward).parameters


def weighted_score(
    model: nn.Module,
    graph: Graph,
    head: int,
    relation: int,
    tail: int,
    weights: list[Tensor],
) -> Tensor:
    """logit(tail | head, relation) with layer t's messages scaled by ``weights[t]`` (float
    [E] each): :meth:`CMPNN.encode` layer by layer, each layer with its own weights.
    Returns a 0-dim tensor (differentiable in the weights and the parameters)."""
    from cmpnn_dist.model.init import initial_states
    from cmpnn_dist.model.readout import relation_node_sets

    if not supports_edge_weight(model):
        raise UsageError(
            "path explanations need a C-MPNN (model.family=cmpnn) whose layers take per-edge "
            f"weights (edge_weight=); this model is a {type(model).__name__}"
        )
    if len(weights) != len(model.layers):
        raise ValueError(f"{len(model.layers)} layers but {len(weights)} weight tensors")
    device = graph.device
    heads = torch.tensor([head], device=device)
    rels = torch.tensor([relation], device=device)
    model._check(graph, heads, rels)
    z_q = model.query(rels)
    h0 = initial_states(model.cfg.init, heads, z_q, graph.num_nodes)
    node_sets = None
    if model.cfg.readout == "relation":
        node_sets = relation_node_sets(graph, rels, None)
    h = h0
    for layer, w in zip(model.layers, weights, strict=True):
        hist = h if str(model.cfg.history) == "t" else h0
        h = layer(graph, h, hist, z_q, None, node_sets, edge_weight=w)
    return model.decoder(h.transpose(0, 1), z_q)[0, tail]


def edge_gradients(
    model: nn.Module, graph: Graph, head: int, relation: int, tail: int
) -> tuple[Tensor, float]:
    """``(g float [T, E], logit)``: g[t, e] = d logit(tail | head, relation) / d w^(t)_e at
    all-ones weights, and the logit itself.

    ``relation`` in [0, 2|R|) (inverse ids answer head queries).  The model runs in eval
    mode; INIT 3 draws its noise from a fixed seed (torch's global RNG is left untouched).
    """
    device = graph.device
    dtype = model.query.weight.dtype
    weights = [
        torch.ones(graph.num_edges, device=device, dtype=dtype, requires_grad=True)
        for _ in model.layers
    ]
    was_training = model.training
    # the fused kernels decline edge weights: an explicit "fused" runs as "auto" (reference)
    ops_cfgs = {id(layer.ops): layer.ops for layer in model.layers if hasattr(layer, "ops")}
    saved = {k: c.impl for k, c in ops_cfgs.items()}
    model.eval()
    try:
        for c in ops_cfgs.values():
            if c.impl == "fused":
                c.impl = "auto"
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(0)
            with torch.enable_grad():
                score = weighted_score(model, graph, head, relation, tail, weights)
                grads = torch.autograd.grad(score, weights, allow_unused=True)
    finally:
        model.train(was_training)
        for k, c in ops_cfgs.items():
            c.impl = saved[k]
    rows = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, weights, strict=True)]
    return torch.stack(rows).detach().float(), float(score.detach())


_HASH = 1_000_003  # edge-sequence hash: h' = h * _HASH + e + 1 (int64, wrapping)


def _top_per_group(value: Tensor, group: Tensor, ident: Tensor, beam: int) -> tuple[Tensor, Tensor]:
    """Indices of the kept candidates and their slot: the best candidate of each distinct
    ``(group, ident)`` (an edge sequence reached twice keeps its best layer assignment), then
    the ``beam`` best of each group, in descending value."""
    order = torch.sort(value, descending=True, stable=True)[1]
    _, inverse = torch.unique(
        torch.stack([group[order], ident[order]], 1), dim=0, return_inverse=True
    )
    first = torch.full((int(inverse.max()) + 1,), order.numel(), device=value.device)
    first = first.scatter_reduce(
        0, inverse, torch.arange(order.numel(), device=value.device), "amin"
    )
    order = order[torch.sort(first)[0]]  # still by descending value
    order = order[torch.sort(group[order], stable=True)[1]]
    g = group[order]
    counts = torch.bincount(g)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(g.numel(), device=g.device) - start[g]
    keep = pos < beam
    return order[keep], pos[keep]


def beam_search_paths(
    graph: Graph,
    grads: Tensor,
    source: int,
    target: int,
    k: int = 5,
    beam: int = 10,
    wait: bool = True,
) -> list[tuple[float, list[int], list[int]]]:
    """The ``k`` best paths from ``source`` to ``target``:
    ``[(mean importance, [edge ids], [layer of each edge])]``, best first.

    A path's l-th edge is taken at layer t_l with t_1 < t_2 < ... (``wait=True``: a message
    may wait at a node, the f(t) = t history and the shortcut keep h^(t)) or t_l = l - 1
    (``wait=False``: NBFNet's scheme); its importance is ``mean_l grads[t_l, e_l]`` and each
    edge sequence counts once, with its best layer assignment.  Edges out of ``target`` and
    (edge, layer) pairs of exactly zero gradient (no influence on the logit) are not used.
    For every layer, node and path length the ``beam`` best partial paths (by summed
    importance) are kept; the best path of each length is exact for any ``beam``.

    Args:
        graph: the message graph (edge e = ``src[e] -rel[e]-> dst[e]``).
        grads: float [T, E] edge importances per layer (:func:`edge_gradients`).
        source, target: node ids.  k: paths returned.  beam: partial paths kept per state.
    """
    num_layers, num_nodes = grads.shape[0], graph.num_nodes
    dev = graph.device
    grads = grads.to(dev)
    src, dst = graph.src, graph.dst()
    usable = src != target
    lengths = num_layers + 1  # path lengths 0..T; 0 is the empty path at the source
    dist = torch.full((num_nodes, lengths, beam), float("-inf"), device=dev)
    ident = torch.zeros((num_nodes, lengths, beam), dtype=torch.long, device=dev)
    dist[source, 0, 0] = 0.0
    backs: list[tuple[Tensor, Tensor]] = []
    found: list[tuple[float, int, int, int]] = []  # (sum, last layer, length, slot)
    for t in range(num_layers):
        parts: list[tuple[Tensor, ...]] = []  # (value, node, length, ident, edge, prev slot)
        if wait:
            x, ln, s = torch.nonzero(torch.isfinite(dist), as_tuple=True)
            parts.append((dist[x, ln, s], x, ln, ident[x, ln, s], torch.full_like(x, -1), s))
        active = usable & (grads[t] != 0)
        for ln in range(1, lengths):
            prev = dist[:, ln - 1]
            edges = torch.nonzero(active & torch.isfinite(prev[src, 0])).squeeze(1)
            if edges.numel() == 0:
                continue
            cand = prev[src[edges]] + grads[t, edges].unsqueeze(1)
            row, s = torch.nonzero(torch.isfinite(cand), as_tuple=True)
            e = edges[row]
            new_ident = ident[src[e], ln - 1, s] * _HASH + e + 1
            parts.append((cand[row, s], dst[e], torch.full_like(e, ln), new_ident, e, s))
        dist = torch.full_like(dist, float("-inf"))
        edge_t = torch.full(dist.shape, -2, dtype=torch.long, device=dev)
        slot_t = torch.full_like(edge_t, -1)
        if parts:
            value, node, ln, idn, edge, slot = (torch.cat(c) for c in zip(*parts, strict=True))
            keep, pos = _top_per_group(value, node * lengths + ln, idn, beam)
            where = (node[keep], ln[keep], pos)
            dist[where] = value[keep]
            ident[where] = idn[keep]
            edge_t[where] = edge[keep]
            slot_t[where] = slot[keep]
        backs.append((edge_t.cpu(), slot_t.cpu()))
        if not wait:  # NBFNet: paths of length t + 1 end at layer t
            ends = dist[target, t + 1].cpu()
            found += [(float(v), t, t + 1, s) for s, v in enumerate(ends.tolist()) if v > -1e300]
    if wait:
        ends = dist[target].cpu()
        found += [
            (float(ends[ln, s]), num_layers - 1, ln, s)
            for ln in range(1, lengths)
            for s in range(beam)
            if torch.isfinite(ends[ln, s])
        ]
    src_cpu = src.cpu()
    paths = []
    for total, last, length, s in found:
        node, ln, edges, layers = target, length, [], []
        for t in range(last, -1, -1):
            e, prev_slot = int(backs[t][0][node, ln, s]), int(backs[t][1][node, ln, s])
            if e >= 0:
                edges.append(e)
                layers.append(t)
                node, ln = int(src_cpu[e]), ln - 1
            s = prev_slot
        paths.append((total / length, edges[::-1], layers[::-1]))
    paths.sort(key=lambda p: -p[0])
    return paths[:k]


@dataclass
class Explanation:
    """The paths explaining the answer ``tail`` of ``(head, relation, ?)`` (ids; ``relation``
    in [0, 2|R|)) with names; ``paths``: ``[(mean importance, [(src, rel, dst) edges])]``
    with ``rel`` in [0, 2|R|) (``>= |R|``: an inverse edge, the fact ``(dst, rel - |R|, src)``);
    ``layers[i]``: the layer at which each edge of path i carries its message.
    """

    head: int
    relation: int
    tail: int
    score: float
    paths: list[tuple[float, list[tuple[int, int, int]]]]
    entity_names: list[str] = field(repr=False)
    relation_names: list[str] = field(repr=False)
    layers: list[list[int]] = field(default_factory=list)

    @property
    def num_relations(self) -> int:
        return len(self.relation_names)

    def relation_label(self, rel: int) -> str:
        r = self.num_relations
        return self.relation_names[rel] if rel < r else self.relation_names[rel - r] + "^-1"

    def edge_text(self, edge: tuple[int, int, int], first: bool = True) -> str:
        s, rel, d = edge
        names, r = self.entity_names, self.num_relations
        arrow = (
            f" -{self.relation_names[rel]}-> "
            if rel < r
            else f" <-{self.relation_names[rel - r]}- "
        )
        return (names[s] if first else "") + arrow + names[d]

    def path_text(self, edges: list[tuple[int, int, int]]) -> str:
        return "".join(self.edge_text(e, i == 0) for i, e in enumerate(edges))

    def frame(self) -> pd.DataFrame:
        """One row per path: ``rank``, ``importance``, ``length``, ``path`` (names),
        ``layers`` (the layer of each edge, when known)."""
        rows = []
        for i, (imp, p) in enumerate(self.paths):
            layers = self.layers[i] if i < len(self.layers) else None
            rows.append(
                {
                    "rank": i + 1,
                    "importance": imp,
                    "length": len(p),
                    "path": self.path_text(p),
                    "layers": layers,
                }
            )
        return pd.DataFrame(rows, columns=["rank", "importance", "length", "path", "layers"])

    def summary(self) -> str:
        """The paths on one line: ``importance: path | ...``."""
        return " | ".join(f"{imp:.4g}: {self.path_text(p)}" for imp, p in self.paths)

    def relations_of(self, i: int = 0) -> list[str]:
        """Relation labels along path ``i`` (inverse edges as ``name^-1``)."""
        return [self.relation_label(rel) for _, rel, _ in self.paths[i][1]]

    def draw(self, path: Any, **kwargs: Any) -> None:
        """Write the explanation subgraph as PNG / SVG / PDF (see :mod:`.draw`)."""
        from cmpnn_dist.predict.draw import draw_explanation

        draw_explanation(self, path, **kwargs)

    def _repr_html_(self) -> str:  # notebooks
        return self.frame()._repr_html_()


def explain_fact(
    predictor: Any,
    head: int,
    relation: int,
    tail: int,
    k: int = 5,
    beam: int = 10,
    wait: bool = True,
) -> Explanation:
    """:class:`Explanation` of the answer ``tail`` to ``(head, relation, ?)`` on the
    predictor's graph; ``relation`` in [0, 2|R|)."""
    graph = predictor.graph
    grads, score = edge_gradients(predictor.model, graph, head, relation, tail)
    found = beam_search_paths(graph, grads, head, tail, k=k, beam=max(beam, k), wait=wait)
    src, rel, dst = graph.src.cpu(), graph.rel.cpu(), graph.dst().cpu()
    paths = [
        (imp, [(int(src[e]), int(rel[e]), int(dst[e])) for e in edges]) for imp, edges, _ in found
    ]
    return Explanation(
        head,
        relation,
        tail,
        score,
        paths,
        predictor.entities.names,
        predictor.relations.names,
        [layers for _, _, layers in found],
    )
