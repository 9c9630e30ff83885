"""Every model the config can build gives every parameter a gradient in one step, so the DDP
wrapper runs with ``find_unused_parameters=False`` (no per-step graph traversal)."""

from __future__ import annotations

import inspect
import itertools

import torch

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.distributed.context import RayTrainContext
from cmpnn_dist.model.build import build_model
from tests.helpers.graphs import hub_graph


def _configs():
    for init, msg, agg, hist, readout in itertools.product(
        [0, 1, 2, 3], [1, 2, 3, "transe", "rotate"], ["sum", "mean", "max", "pna"], ["t", "0"],
        ["none", "sum", "relation"],
    ):  # fmt: skip
        yield ModelConfig(init=init, message=msg, aggregate=agg, history=hist, readout=readout,
                          num_bases=2 if msg == 3 else None)  # fmt: skip
    for family in ("rgcn", "compgcn"):
        yield ModelConfig(family=family, num_bases=2 if family == "rgcn" else None)


def test_every_parameter_gets_a_gradient_in_every_configuration():
    graph = hub_graph()
    checked = 0
    for cfg in _configs():
        cfg.num_layers, cfg.hidden_dim, cfg.decoder_hidden_dim = 2, 4, 4
        model = build_model(cfg, OpsConfig(impl="reference"), graph.num_relations // 2,
                            graph.num_nodes)  # fmt: skip
        out = model(graph, torch.tensor([1, 2]), torch.tensor([0, 4]))
        out.sum().backward()
        unused = [n for n, p in model.named_parameters() if p.grad is None]
        assert not unused, (cfg, unused)
        checked += 1
    assert checked == 4 * 5 * 4 * 2 * 3 + 2


def test_ddp_wrapper_does_not_search_for_unused_parameters():
    default = inspect.signature(RayTrainContext).parameters["find_unused_parameters"].default
    assert default is False
