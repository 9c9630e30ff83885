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

from cmpnn_dist.errors import UsageError
from cmpnn_dist.graph import Graph
from cmpnn_dist.predict.search import beam_search_paths

__all__ = [
    "Explanation",
    "beam_search_paths",
    "edge_gradients",
    "explain_fact",
    "supports_edge_weight",
    "weighted_score",
]


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
    [E] each): the model's own forward (:meth:`CMPNN.encode` takes one weight per layer).
    Returns a 0-dim tensor (differentiable in the weights and the parameters)."""
    if not supports_edge_weight(model):
        raise UsageError(
            "path explanations need a C-MPNN (model.family=cmpnn) whose layers take per-edge "
            f"weights (edge_weight=); this model is a {type(model).__name__}"
        )
    device = graph.device
    heads = torch.tensor([head], device=device)
    rels = torch.tensor([relation], device=device)
    return model(graph, heads, rels, edge_weight=list(weights))[0, tail]


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


@dataclass
class Explanation:
    """The paths explaining the answer ``tail`` of ``(head, relation, ?)`` (ids; ``relation``
    in [0, 2|R|)) with names; ``paths``: ``[(mean importance, [(src, rel, dst) edges])]``
    with ``rel`` in [0, 2|R|) (``>= |R|``: an inverse edge, the fact ``(dst, rel - |R|, src)``);
    ``layers[i]``: the layer at which each edge of path i carries its message;
    ``edge_weights[i]``: each edge's importance ``g^(t_l)_{e_l}`` at that layer (their mean
    is the path's importance).
    """

    head: int
    relation: int
    tail: int
    score: float
    paths: list[tuple[float, list[tuple[int, int, int]]]]
    entity_names: list[str] = field(repr=False)
    relation_names: list[str] = field(repr=False)
    layers: list[list[int]] = field(default_factory=list)
    edge_weights: list[list[float]] = field(default_factory=list)

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
        """The paths on one line: ``importance: path | ...`` (``no path`` when none of at
        most T edges reaches the answer through edges that influence its logit)."""
        if not self.paths:
            return "no path"
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
    g = grads.cpu()
    weights = [
        [float(g[t, e]) for e, t in zip(edges, layers, strict=True)] for _, edges, layers in found
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
        weights,
    )
