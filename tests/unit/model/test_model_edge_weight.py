"""CMPNN.forward(..., edge_weight): per-edge message weights through every layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN

NUM_REL = 2


def _setup(seed=0, **cfg):
    rng = np.random.default_rng(seed)
    facts = np.unique(
        np.stack([rng.integers(0, 8, 18), rng.integers(0, NUM_REL, 18), rng.integers(0, 8, 18)], 1),
        axis=0,
    )
    graph = graph_from_triples(8, NUM_REL, facts)
    options = dict(num_layers=2, hidden_dim=4, decoder_hidden_dim=4)
    options.update(cfg)
    return graph, ModelConfig(**options)


def _model(cfg, impl, seed=0):
    torch.manual_seed(seed)
    return CMPNN(cfg, NUM_REL, OpsConfig(impl=impl, chunk_elements=8)).double()


HEADS, RELS = torch.tensor([0, 3, 5]), torch.tensor([0, 1, 3])


@pytest.mark.parametrize("impl", ["naive", "reference"])
@pytest.mark.parametrize("cfg", [dict(), dict(message=3, aggregate="pna", readout="relation")])
def test_model_weights_of_one_are_the_unweighted_model(impl, cfg):
    graph, mcfg = _setup(**cfg)
    model = _model(mcfg, impl)
    mask = graph.query_edge_mask(torch.tensor([[0, 0, 1]]), "one_hop")
    plain = model(graph, HEADS, RELS, edge_mask=mask)
    for shape in ((graph.num_edges,), (3, graph.num_edges)):
        ones = torch.ones(shape, dtype=torch.float64)
        assert torch.equal(model(graph, HEADS, RELS, edge_mask=mask, edge_weight=ones), plain)


@pytest.mark.parametrize("impl", ["naive", "reference"])
def test_model_zero_weight_equals_removing_the_edge_with_sum_aggregation(impl):
    graph, mcfg = _setup(seed=1)
    model = _model(mcfg, impl)
    keep = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0)) > 0.3
    masked = model(graph, HEADS, RELS, edge_mask=keep)
    weighted = model(graph, HEADS, RELS, edge_weight=keep.double())
    torch.testing.assert_close(weighted, masked, rtol=0, atol=1e-14)
    assert (masked - model(graph, HEADS, RELS)).abs().max() > 1e-6  # the mask matters


def test_model_weight_gradient_matches_finite_differences():
    """d logit / d w_e through two layers (reference impl, float64)."""
    graph, mcfg = _setup(seed=2, aggregate="pna")
    model = _model(mcfg, "reference")
    weight = (torch.rand(graph.num_edges, dtype=torch.float64) + 0.5).requires_grad_()

    def fn(w):
        return model(graph, HEADS, RELS, edge_weight=w)

    assert torch.autograd.gradcheck(fn, (weight,))
    (grad,) = torch.autograd.grad(fn(weight)[0, 1], [weight])
    assert grad.abs().max() > 0


def test_model_per_query_weights_act_per_query():
    """[B, E] weights: query b's logits depend on row b only (equal to a batch of one)."""
    graph, mcfg = _setup(seed=3)
    model = _model(mcfg, "reference")
    weight = torch.rand(3, graph.num_edges, dtype=torch.float64)
    together = model(graph, HEADS, RELS, edge_weight=weight)
    for b in range(3):
        alone = model(graph, HEADS[b : b + 1], RELS[b : b + 1], edge_weight=weight[b])
        torch.testing.assert_close(together[b : b + 1], alone)
