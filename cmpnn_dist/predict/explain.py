"""Path explanations of one prediction from edge-weight gradients (NBFNet, Zhu et al. 2021, 5.3).

For the query ``(u, q, ?)`` and the answer v, every layer t = 0 .. T-1 gets its own edge
weights ``w^(t) in R^|E|`` scaling the messages (``m_e <- w^(t)_e m_e``, all ones = the
trained model).  The importance of edge e at layer t is the gradient of the answer's logit,

    g^(t)_e = d logit(v | u, q) / d w^(t)_e   at w = 1,

and the importance of a path ``u = x_0 -e_1-> x_1 ... -e_L-> x_L = v`` (L <= T) is the mean
``(1/L) sum_l g^(l-1)_{e_l}``: its l-th edge carries the message in layer l - 1, as in the
Bellman-Ford view of the model.  The k best paths come from a beam search: for each layer t
and node x keep the ``beam`` best walks of length t + 1 from u to x (summed importance);
walks stop at v (edges out of v are not followed).  Paths of every length 1..T that reach v
are ranked by mean importance.
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
    """True when the model's layers take per-edge weights (``edge_weight=``)."""
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
            "path explanations need per-edge weights in message passing (edge_weight=), "
            "which this build's model layers do not take"
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


def beam_search_paths(
    graph: Graph, grads: Tensor, source: int, target: int, k: int = 5, beam: int = 10
) -> list[tuple[float, list[int]]]:
    """The ``k`` best paths from ``source`` to ``target``: ``[(mean importance, [edge ids])]``.

    Args:
        graph: the message graph (edge e = ``src[e] -rel[e]-> dst[e]``).
        grads: float [T, E] edge importances per layer (:func:`edge_gradients`).
        source, target: node ids.  k: paths returned.  beam: walks kept per node and layer.
    """
    num_nodes = graph.num_nodes
    grads = grads.to(graph.device)
    src, dst = graph.src, graph.dst()
    usable = src != target
    dist = torch.full((num_nodes, beam), float("-inf"), device=graph.device)
    dist[source, 0] = 0.0
    back_edge: list[Tensor] = []
    back_slot: list[Tensor] = []
    found: list[tuple[float, int, int]] = []  # (summed importance, length, slot)
    for t in range(grads.shape[0]):
        edges = torch.nonzero(usable & torch.isfinite(dist[src, 0])).squeeze(1)
        cand = dist[src[edges]] + grads[t, edges].unsqueeze(1)  # [M, beam]
        finite = torch.isfinite(cand)
        e_idx, slot = torch.nonzero(finite, as_tuple=True)
        value, e_idx = cand[e_idx, slot], edges[e_idx]
        order = torch.sort(value, descending=True, stable=True)[1]
        value, e_idx, slot = value[order], e_idx[order], slot[order]
        node = dst[e_idx]
        order = torch.sort(node, stable=True)[1]
        value, e_idx, slot, node = value[order], e_idx[order], slot[order], node[order]
        counts = torch.bincount(node, minlength=num_nodes)
        first = torch.cumsum(counts, 0) - counts
        pos = torch.arange(node.numel(), device=node.device) - first[node]
        keep = pos < beam
        dist = torch.full((num_nodes, beam), float("-inf"), device=graph.device)
        edge_t = torch.full((num_nodes, beam), -1, dtype=torch.long, device=graph.device)
        slot_t = torch.full_like(edge_t, -1)
        dist[node[keep], pos[keep]] = value[keep]
        edge_t[node[keep], pos[keep]] = e_idx[keep]
        slot_t[node[keep], pos[keep]] = slot[keep]
        back_edge.append(edge_t.cpu())
        back_slot.append(slot_t.cpu())
        at_target = dist[target].cpu()
        for s in range(beam):
            if torch.isfinite(at_target[s]):
                found.append((float(at_target[s]), t + 1, s))
    paths = []
    for total, length, s in found:
        node, edges = target, []
        for t in range(length - 1, -1, -1):
            e = int(back_edge[t][node, s])
            edges.append(e)
            node, s = int(src[e]), int(back_slot[t][node, s])
        paths.append((total / length, edges[::-1]))
    paths.sort(key=lambda p: -p[0])
    return paths[:k]


@dataclass
class Explanation:
    """The paths explaining the answer ``tail`` of ``(head, relation, ?)`` (ids; ``relation``
    in [0, 2|R|)) with names; ``paths``: ``[(mean importance, [(src, rel, dst) edges])]``
    with ``rel`` in [0, 2|R|) (``>= |R|``: an inverse edge, the fact ``(dst, rel - |R|, src)``).
    """

    head: int
    relation: int
    tail: int
    score: float
    paths: list[tuple[float, list[tuple[int, int, int]]]]
    entity_names: list[str] = field(repr=False)
    relation_names: list[str] = field(repr=False)

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
        """One row per path: ``rank``, ``importance``, ``length``, ``path`` (names)."""
        return pd.DataFrame(
            [
                {"rank": i, "importance": imp, "length": len(p), "path": self.path_text(p)}
                for i, (imp, p) in enumerate(self.paths, start=1)
            ],
            columns=["rank", "importance", "length", "path"],
        )

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
    predictor: Any, head: int, relation: int, tail: int, k: int = 5, beam: int = 10
) -> Explanation:
    """:class:`Explanation` of the answer ``tail`` to ``(head, relation, ?)`` on the
    predictor's graph; ``relation`` in [0, 2|R|)."""
    graph = predictor.graph
    grads, score = edge_gradients(predictor.model, graph, head, relation, tail)
    found = beam_search_paths(graph, grads, head, tail, k=k, beam=max(beam, k))
    src, rel, dst = graph.src.cpu(), graph.rel.cpu(), graph.dst().cpu()
    paths = [
        (imp, [(int(src[e]), int(rel[e]), int(dst[e])) for e in edges]) for imp, edges in found
    ]
    return Explanation(
        head,
        relation,
        tail,
        score,
        paths,
        predictor.entities.names,
        predictor.relations.names,
    )
