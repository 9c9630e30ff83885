"""Path explanations on small hand-made graphs: per-layer edge gradients against finite
differences and against the model's own forward, the beam search against brute-force
enumeration of every walk, and the path text."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.errors import UsageError
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.predict.explain import (
    Explanation,
    beam_search_paths,
    edge_gradients,
    supports_edge_weight,
    weighted_score,
)

NUM_REL = 2


def _graph(seed: int, num_nodes: int = 7, num_facts: int = 14):
    rng = np.random.default_rng(seed)
    facts = np.stack(
        [
            rng.integers(0, num_nodes, num_facts),
            rng.integers(0, NUM_REL, num_facts),
            rng.integers(0, num_nodes, num_facts),
        ],
        1,
    )
    facts = np.unique(facts[facts[:, 0] != facts[:, 2]], axis=0)
    return graph_from_triples(num_nodes, NUM_REL, facts)


def _model(impl: str = "reference", **cfg) -> CMPNN:
    torch.manual_seed(0)
    options = dict(num_layers=3, hidden_dim=4, decoder_hidden_dim=4)
    options.update(cfg)
    model = CMPNN(ModelConfig(**options), NUM_REL, OpsConfig(impl=impl))
    return model.double().eval()


def test_every_model_family_takes_edge_weight():
    """The capability the tests below exercise, asserted instead of skipped over: C-MPNN
    layers of every message / aggregation take per-edge weights."""
    for cfg in (dict(), dict(aggregate="pna", message=3, readout="relation"), dict(history="0")):
        assert supports_edge_weight(_model(**cfg)), cfg


@pytest.mark.parametrize("impl", ["naive", "reference"])
@pytest.mark.parametrize(
    "cfg", [dict(), dict(aggregate="pna", message=3, readout="relation"), dict(history="0")]
)
def test_per_layer_gradients_match_finite_differences(impl, cfg):
    graph = _graph(0)
    model = _model(impl, **cfg)
    head, rel, tail = 0, 1, 4
    grads, score = edge_gradients(model, graph, head, rel, tail)
    assert grads.shape == (3, graph.num_edges)
    ones = [torch.ones(graph.num_edges, dtype=torch.float64) for _ in range(3)]
    with torch.no_grad():
        assert weighted_score(model, graph, head, rel, tail, ones).item() == pytest.approx(score)
        eps = 1e-6
        numeric = torch.zeros(3, graph.num_edges, dtype=torch.float64)
        for t, e in itertools.product(range(3), range(graph.num_edges)):
            plus = [w.clone() for w in ones]
            minus = [w.clone() for w in ones]
            plus[t][e] += eps
            minus[t][e] -= eps
            diff = weighted_score(model, graph, head, rel, tail, plus)
            diff = diff - weighted_score(model, graph, head, rel, tail, minus)
            numeric[t, e] = diff / (2 * eps)
    torch.testing.assert_close(grads.double(), numeric, rtol=1e-4, atol=1e-6)
    assert grads.abs().max() > 1e-4  # the logit depends on the edges


def test_per_layer_gradients_sum_to_the_shared_weight_gradient():
    """One weight shared by every layer (the model's own forward): the chain rule sums the
    per-layer gradients.  Also checks the layer-by-layer forward against CMPNN.forward."""
    graph = _graph(1)
    model = _model(aggregate="pna")
    head, rel, tail = 2, 3, 5
    grads, score = edge_gradients(model, graph, head, rel, tail)
    shared = torch.ones(graph.num_edges, dtype=torch.float64, requires_grad=True)
    logits = model(graph, torch.tensor([head]), torch.tensor([rel]), edge_weight=shared)
    (expected,) = torch.autograd.grad(logits[0, tail], [shared])
    assert logits[0, tail].item() == pytest.approx(score, rel=1e-12)
    torch.testing.assert_close(grads.sum(0).double(), expected, rtol=1e-5, atol=1e-7)


def _all_paths(graph, grads, source, target, wait):
    """Brute force: every walk of 1..T edges from source that first reaches target at its
    end (no edge leaves target), each with its best layer assignment (strictly increasing
    layers when ``wait``, else layer l - 1 for the l-th edge) and mean importance."""
    num_layers = grads.shape[0]
    src, dst = graph.src.tolist(), graph.dst().tolist()
    out_edges = {}
    for e, s in enumerate(src):
        out_edges.setdefault(s, []).append(e)
    found = []
    frontier = [[]]
    for _ in range(num_layers):
        nxt = []
        for walk in frontier:
            at = source if not walk else dst[walk[-1]]
            if at == target and walk:
                continue
            for e in out_edges.get(at, []):
                nxt.append(walk + [e])
        for walk in nxt:
            if dst[walk[-1]] != target:
                continue
            n = len(walk)
            options = itertools.combinations(range(num_layers), n) if wait else [range(n)]
            best = max(
                (sum(float(grads[t, e]) for t, e in zip(ts, walk, strict=True)) / n, list(ts))
                for ts in options
            )
            found.append((best[0], walk, best[1]))
        frontier = nxt
    return sorted(found, key=lambda w: -w[0])


@pytest.mark.parametrize("wait", [True, False], ids=["wait", "nbfnet"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_finds_the_best_paths(seed, wait):
    graph = _graph(seed, num_nodes=6, num_facts=16)
    grads = torch.randn(3, graph.num_edges, generator=torch.Generator().manual_seed(seed))
    source, target = 0, 3
    paths = _all_paths(graph, grads, source, target, wait)
    assert len(paths) >= 3
    # a beam wider than any state's number of partial paths: exact, every path in order
    found = beam_search_paths(graph, grads, source, target, k=len(paths), beam=10_000, wait=wait)
    assert [(w, ts) for _, w, ts in found] == [(w, ts) for _, w, ts in paths]
    np.testing.assert_allclose([i for i, _, _ in found], [i for i, _, _ in paths], rtol=1e-6)
    # a beam of one still finds the best path (max-sum dynamic programming per length)
    best = beam_search_paths(graph, grads, source, target, k=1, beam=1, wait=wait)
    assert best[0][1] == paths[0][1]
    assert best[0][0] == pytest.approx(paths[0][0], rel=1e-6)


def test_path_text_names_inverse_edges():
    expl = Explanation(
        head=0,
        relation=0,
        tail=2,
        score=1.5,
        paths=[(0.5, [(0, 1, 1), (1, 2 + 0, 2)])],  # 0 -r1-> 1, then 1 -r0^-1-> 2
        entity_names=["a", "b", "c"],
        relation_names=["r0", "r1"],
    )
    assert expl.path_text(expl.paths[0][1]) == "a -r1-> b <-r0- c"
    assert expl.relations_of(0) == ["r1", "r0^-1"]
    assert expl.frame().to_dict("records") == [
        {"rank": 1, "importance": 0.5, "length": 2, "path": "a -r1-> b <-r0- c", "layers": None}
    ]


def test_a_model_without_edge_weights_is_a_clear_error():
    class Old(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(1, 1)])

    assert not supports_edge_weight(Old())
    with pytest.raises(UsageError, match="edge_weight"):
        weighted_score(Old(), _graph(0), 0, 0, 1, [torch.ones(1)])
