"""Pruned propagation (model.propagation=pruned): the dense model as its limit over the design
space, the pruned subgraph against a slow per-query reference, the priority gradient, the tie
rule for unvisited candidates, and the config's refusals."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch

from cmpnn_dist.config import OpsConfig
from cmpnn_dist.evaluation.ranking import tied_rank
from cmpnn_dist.model import CMPNN
from cmpnn_dist.model.init import head_states
from tests.helpers.pruned import (
    BASE,
    NUM_REL,
    QUERIES,
    cfg_of,
    cli_error_lines,
    design_space,
    graph,
    pair,
    slow_pruned,
)

# the dense model is the limit with either gate (budgets that keep everything select nothing,
# and the sigmoid gate gives way to the straight-through one) and either priority
KEEP_ALL = [
    dict(node_ratio=1.0, degree_ratio=1.0),  # the defaults: decoder, sigmoid
    dict(max_nodes=10**6, degree_ratio=1.5, priority="mlp", gate="straight_through"),
]


def check_dense_limit(kw: dict, prune: dict, mask: torch.Tensor | None, grads: bool) -> None:
    """The pruned model with budgets that keep everything against the dense model with the
    same weights: logits (and their ranks) on ``graph()``; with ``grads``, every dense
    parameter's gradient of a weighted sum of the logits.  The priority's gradient also
    reaches h and z_q (as A*Net's), so ``grads`` needs priority=mlp, whose output weight is
    zeroed here: that path is then 0."""
    g = graph()
    pruned, dense = pair(cfg_of(prune, **kw))
    if grads:
        with torch.no_grad():
            pruned.pruned.priority[2].weight.zero_()
    weights = torch.linspace(-1, 1, g.num_nodes, dtype=torch.float64)
    logits = []
    for model in (pruned, dense):
        model.train(grads)
        torch.manual_seed(5)  # INIT 3 draws its noise in the forward pass
        with torch.set_grad_enabled(grads):
            logits.append(model(g, *QUERIES, edge_mask=mask))
        if grads:
            (logits[-1] * weights).sum().backward()
    got, want = logits
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-10), kw
    ranks = lambda s: (s.unsqueeze(2) > s.unsqueeze(1)).sum(2)  # noqa: E731
    assert torch.equal(ranks(got), ranks(want)), kw
    # every node visited and every edge kept in every layer
    assert pruned.pruned.last_stats[0][2] == len(QUERIES[0]) * g.num_nodes
    if grads:
        named = dict(pruned.named_parameters())
        for name, p in dense.named_parameters():
            assert p.grad is not None, (kw, name)
            assert torch.allclose(named[name].grad, p.grad, rtol=1e-8, atol=1e-10), (kw, name)


@pytest.mark.parametrize(
    "prune,remove", [(KEEP_ALL[0], False), (KEEP_ALL[1], True)], ids=["ratios", "max_nodes_mask"]
)
def test_keep_everything_is_the_dense_model(prune, remove):
    """Over the whole design space: the logits, and (priority=mlp) every gradient."""
    mask = None
    if remove:
        mask = torch.ones(graph().num_edges, dtype=torch.bool)
        mask[::3] = False
    for kw in design_space():
        check_dense_limit(kw, prune, mask, grads=prune.get("priority") == "mlp")


def test_the_design_space_reads_the_registries(monkeypatch):
    """An aggregation registered elsewhere (here inside the test) is in the design space the
    dense-limit test runs, and the limit holds for it with no other change."""
    from cmpnn_dist.config import registry as config_registry
    from cmpnn_dist.model.aggregations import base as registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(config_registry, "_REGISTERED_CHOICES", {})

    @registry.register
    class MaxMinusMin(registry.Aggregation):
        name, reductions = "max_minus_min", ("max", "min")

        def forward(self, raw):
            return raw["max"] - raw["min"]

    space = design_space()
    assert dict(BASE, aggregate="max_minus_min") in space
    assert {kw["message"] for kw in space} >= {1, "query_mul", "linear", "transe", "rotate"}
    check_dense_limit(dict(BASE, aggregate="max_minus_min"), KEEP_ALL[1], None, grads=True)


@pytest.mark.parametrize(
    "prune",
    [
        dict(node_ratio=0.15),  # the defaults: priority = the decoder, sigmoid gate (A*Net)
        dict(max_nodes=2, max_edges=3),
        dict(node_ratio=0.15, priority="mlp", gate="straight_through"),
    ],
)
def test_pruned_matches_a_slow_per_query_reference(prune):
    """Mean aggregation, no readout (the layer on the masked full graph equals the layer on the
    subgraph for the touched nodes: degrees are those of the kept edges)."""
    g = graph(seed=1, num_nodes=20, num_facts=60)
    model = pair(cfg_of(prune, aggregate="mean", layer_norm=False), seed=3)[0].eval()
    heads, rels = torch.tensor([0, 4, 9]), torch.tensor([1, 2, 5])
    with torch.no_grad():
        got = model(g, heads, rels)
        for b in range(3):
            want, unvisited = slow_pruned(model, g, int(heads[b]), int(rels[b]))
            assert unvisited, "the budget must leave some node unvisited"
            assert torch.allclose(got[b], want, rtol=1e-9, atol=1e-10), b


def test_unvisited_candidates_tie_at_the_initial_score():
    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = pair(cfg_of(dict(max_nodes=1, max_edges=1)), seed=0)[0].eval()
    heads, rels = torch.tensor([0, 1]), torch.tensor([0, 3])
    with torch.no_grad():
        scores = model(g, heads, rels)
        const = model.decoder(torch.zeros(2, 1, 8, dtype=scores.dtype), model.query(rels))
    for b in range(2):
        _, unvisited = slow_pruned(model, g, int(heads[b]), int(rels[b]))
        assert len(unvisited) > 20
        assert torch.equal(scores[b, unvisited], const[b, 0].expand(len(unvisited)))
        target = unvisited[0]
        greater = int((scores[b] > scores[b, target]).sum())
        equal = int((scores[b] == scores[b, target]).sum()) - 1
        pess = tied_rank(torch.tensor([greater]), torch.tensor([equal]), "pessimistic")
        avg = tied_rank(torch.tensor([greater]), torch.tensor([equal]), "average")
        assert int(pess) == greater + len(unvisited)  # below every tied unvisited node
        assert float(avg) == greater + 1 + (len(unvisited) - 1) / 2


@pytest.mark.parametrize("priority", ["mlp", "decoder"])
def test_priority_gradient_sigmoid_gate_gradcheck(priority):
    """With the sigmoid gate the logits are a smooth function of the priority's weights (the
    selection is locally constant): autograd against finite differences.  priority=decoder:
    the decoder's weights reach the logits both as the final scorer and through the gates."""
    g = graph(seed=1, num_nodes=20, num_facts=60)
    prune = dict(node_ratio=0.2, gate="sigmoid", priority=priority)
    model = pair(cfg_of(prune, num_layers=2), seed=1)[0]
    heads, rels = torch.tensor([0, 4]), torch.tensor([1, 2])
    if priority == "mlp":
        named = dict(model.pruned.priority.named_parameters())
        params = {f"pruned.priority.{n}": named[n] for n in ("0.bias", "2.weight", "2.bias")}
    else:
        named = dict(model.decoder.named_parameters())
        params = {f"decoder.{n}": named[n] for n in ("hidden.bias", "out.weight", "out.bias")}

    def call(*ws):
        return torch.func.functional_call(
            model, dict(zip(params, ws, strict=True)), (g, heads, rels)
        )

    inputs = tuple(p.detach().clone().requires_grad_(True) for p in params.values())
    assert torch.autograd.gradcheck(call, inputs, eps=1e-6, atol=1e-6)


def test_priority_gradient_straight_through():
    """The straight-through gate sends h itself but passes dL/dg at g = 1 times sigmoid'(p) to
    the priority.  One layer, one sender (the head): d L / d c_2 (the MLP's output bias) must
    equal sigmoid'(p_head) * dL/dg, dL/dg by central differences of the slow reference with
    the sent state scaled by g."""
    g = graph(seed=1, num_nodes=20, num_facts=60)
    prune = dict(max_nodes=1, priority="mlp", gate="straight_through")
    model = pair(cfg_of(prune, num_layers=1), seed=2)[0]
    head, rel = 2, 1
    weights = torch.linspace(-1, 1, g.num_nodes, dtype=torch.float64)
    loss = lambda logits: (logits * weights).sum()  # noqa: E731
    loss(model(g, torch.tensor([head]), torch.tensor([rel]))[0]).backward()
    got = model.pruned.priority[2].bias.grad
    with torch.no_grad():
        eps = 1e-6
        up = loss(slow_pruned(model, g, head, rel, scale=1 + eps)[0])
        down = loss(slow_pruned(model, g, head, rel, scale=1 - eps)[0])
        z = model.query(torch.tensor([rel]))
        p = model.pruned.score(head_states(model.cfg.init, z), z, model.decoder)
    want = (up - down) / (2 * eps) * torch.sigmoid(p) * (1 - torch.sigmoid(p))
    assert abs(float(want)) > 1e-6
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-9)


def test_refusals():
    with pytest.raises(ValueError, match="INIT 0 has no head indicator"):
        CMPNN(cfg_of(init=0), NUM_REL)


def test_explanations_use_the_pruned_subgraph():
    """Per-layer edge gradients of a pruned model: with budgets that keep everything they are
    the dense model's; at a small budget they vanish on every edge the layer did not keep."""
    from cmpnn_dist.predict.explain import edge_gradients

    g = graph(seed=4, num_nodes=20, num_facts=50)
    pruned, dense = pair(cfg_of(dict(node_ratio=1.0), num_layers=2))
    got, logit = edge_gradients(pruned, g, 3, 1, 7)
    want, want_logit = edge_gradients(dense, g, 3, 1, 7)
    assert abs(logit - want_logit) < 1e-9
    assert torch.allclose(got, want, rtol=1e-8, atol=1e-10)
    small = pair(cfg_of(dict(max_nodes=1, max_edges=2), num_layers=2))[0]
    grads, _ = edge_gradients(small, g, 3, 1, 7)
    assert int((grads != 0).sum(1).max()) <= 2  # at most the 2 kept edges per layer
    assert bool((grads[0][g.src != 3] == 0).all())  # layer 0 sends from the head only


@pytest.mark.integration
def test_init_0_is_one_error_line_from_the_cli(tmp_path):
    assert cli_error_lines(tmp_path, "model.propagation=pruned", "model.init=0") == [
        "error: model.propagation=pruned needs model.family=cmpnn with model.init 1-3 (got "
        "family=cmpnn, init=0): INIT 0 has no head indicator to start from"
    ]


def test_bf16_autocast_runs_and_stays_close_to_fp32():
    g = graph(seed=1, num_nodes=20, num_facts=60)
    torch.manual_seed(0)
    heads, rels = torch.tensor([0, 4]), torch.tensor([1, 2])
    for ratio, unvisited in ((1.0, "constant"), (0.3, "constant"), (0.3, "relations")):
        # at 0.3 bf16 priorities may pick other nodes: finite only
        prune = dict(node_ratio=ratio, unvisited=unvisited)
        model = CMPNN(cfg_of(prune, aggregate="pna"), NUM_REL, OpsConfig())
        want = model(g, heads, rels)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model(g, heads, rels)
        assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
        got.float().sum().backward()
        assert model.decoder.hidden.weight.grad is not None  # the priority (A*Net's)
        if ratio == 1.0:
            assert torch.allclose(got.float(), want, atol=0.05, rtol=0.05)


def test_every_parameter_gets_a_gradient_for_ddp():
    """DDP runs with find_unused_parameters=False: every parameter, the priority MLP's
    included, must get a gradient in every step, also when a head has no out-edge."""
    g = graph(seed=1, num_nodes=24, num_facts=12)
    isolated = next(v for v in range(24) if int((g.src == v).sum()) == 0)
    heads, rels = torch.tensor([0, isolated]), torch.tensor([1, 2])
    for kw in design_space():
        model = pair(cfg_of(dict(node_ratio=0.2), **kw))[0]
        for h in (heads, heads[1:]):
            model.zero_grad(set_to_none=True)
            model(g, h, rels[: len(h)]).sum().backward()
            unused = [n for n, p in model.named_parameters() if p.grad is None]
            assert not unused, (kw, h, unused)


def test_segment_topk_against_a_sort_per_segment():
    from cmpnn_dist.model.pruned_select import segment_topk

    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        m = int(torch.randint(1, 60, (1,), generator=gen))
        score = torch.randn(m, generator=gen) * torch.randint(0, 3, (m,), generator=gen)
        score[torch.rand(m, generator=gen) < 0.1] = -0.0  # ties, signed zeros
        seg = torch.randint(0, 4, (m,), generator=gen)
        k = int(torch.randint(1, 6, (1,), generator=gen))
        want = torch.zeros(m, dtype=torch.bool)
        for b in range(4):
            items = sorted((i for i in range(m) if seg[i] == b), key=lambda i: (-score[i], i))
            want[items[:k]] = True
        assert torch.equal(segment_topk(score, seg, k, 4), want)


@pytest.mark.parametrize("preset", ["biokg", "hetionet"])
def test_pruned_presets_are_the_paper_presets_plus_pruning(preset):
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.config import config_to_dict

    base = config_to_dict(compose_config(preset, []))
    pruned = config_to_dict(compose_config(f"{preset}_pruned", []))
    assert pruned["model"].pop("propagation") == "pruned"
    assert base["model"].pop("propagation") == "dense"
    assert 0 < pruned["model"].pop("prune")["node_ratio"] <= 0.05  # a pruned budget
    base["model"].pop("prune")
    assert pruned == base


def test_decoder_priority_is_the_final_scorer():
    """priority=decoder (A*Net): the priority of a state is the decoder's logit, so the pruned
    model has no parameters of its own (its weights are a dense model's and load into one) and
    the senders of a layer are the top-k visited nodes by their current logits."""
    pruned = pair(cfg_of(dict(max_nodes=2, max_edges=4)), seed=4)[0]
    assert pruned.pruned.priority is None
    assert not [k for k in pruned.state_dict() if k.startswith("pruned.")]
    h = torch.randn(6, 8, dtype=torch.float64)
    z = torch.randn(6, 8, dtype=torch.float64)
    want = pruned.decoder(h.unsqueeze(1), z).squeeze(1)
    assert torch.equal(pruned.pruned.score(h, z, pruned.decoder), want)
    # a copy runs on its own decoder: it equals a model built from the copy's weights
    g = graph()
    copy = deepcopy(pruned)
    with torch.no_grad():
        copy.decoder.out.bias.add_(1.0)
    rebuilt = CMPNN(copy.cfg, NUM_REL, copy.ops).double()
    rebuilt.load_state_dict(copy.state_dict())
    got, want = copy(g, *QUERIES), rebuilt(g, *QUERIES)
    assert torch.equal(got, want) and not torch.allclose(got, pruned(g, *QUERIES))
    mlp = pair(cfg_of(dict(max_nodes=2, max_edges=4, priority="mlp")), seed=4)[0]
    assert any(k.startswith("pruned.priority.") for k in mlp.state_dict())


def test_checkpoints_from_before_the_priority_key_keep_the_priority_mlp():
    """A saved config without model.prune.priority comes from runs that had the separate MLP
    (its weights are in the checkpoint); new configs keep what they say."""
    from cmpnn_dist.config import Config, config_to_dict
    from cmpnn_dist.runs.restore import config_from_checkpoint

    saved = config_to_dict(Config())
    saved["model"]["propagation"] = "pruned"
    assert config_from_checkpoint(saved, []).model.prune.priority == "decoder"
    del saved["model"]["prune"]["priority"]
    assert config_from_checkpoint(saved, []).model.prune.priority == "mlp"
    got = config_from_checkpoint(saved, ["model.prune.priority=decoder"]).model.prune.priority
    assert got == "decoder"


def _compiled_or_skip():
    from cmpnn_dist.ops import compiled_cpu

    kernel = compiled_cpu()
    if kernel is None:
        pytest.skip("the compiled CPU kernel is unavailable here (the torch path runs)")
    return kernel


def test_compiled_senders_match_segment_topk():
    """``select_senders`` keeps each query's top-k rows, ties to the earlier row, as the torch
    path's segment_topk (signed zeros and heavy ties included)."""
    from cmpnn_dist.model.pruned_select import segment_topk

    kernel = _compiled_or_skip()
    gen = torch.Generator().manual_seed(1)
    for _ in range(300):
        n, batch = int(torch.randint(1, 30, (1,), generator=gen)), 4
        m = int(torch.randint(1, min(60, n * batch) + 1, (1,), generator=gen))
        keys = torch.randperm(n * batch, generator=gen)[:m]
        score = torch.randn(m, generator=gen) * torch.randint(0, 3, (m,), generator=gen)
        score[torch.rand(m, generator=gen) < 0.1] = -0.0
        k = int(torch.randint(1, 6, (1,), generator=gen))
        want = torch.sort(keys[segment_topk(score, keys // n, k, batch)]).values
        assert torch.equal(kernel.select_senders(keys, score, n, batch, k), want)


@pytest.mark.parametrize("edge_budget", [1, 3, 1000])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_compiled_selection_equals_the_torch_path(edge_budget, masked, weighted, monkeypatch):
    """The compiled selection and packing return the torch path's senders and packed graph
    (rows, edges in its order, edge ids when weighted) for the visited states of every layer
    of real forwards (visited rows, unvisited receivers at the constant score, ties); the
    logits of the two paths are then bit-identical."""
    from cmpnn_dist.model.pruned import PrunedPropagation
    from cmpnn_dist.model.pruned_select import select_senders, select_subgraph

    kernel = _compiled_or_skip()
    g = graph(seed=2, num_nodes=30, num_facts=120)
    prune = dict(max_nodes=3, max_edges=edge_budget)
    model = pair(cfg_of(prune, num_layers=4, aggregate="pna"), seed=4)[0].eval()
    heads, rels = torch.tensor([0, 4, 9, 4, 17]), torch.tensor([1, 2, 5, 0, 3])
    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(g.num_edges, generator=gen) < 0.8) if masked else None
    weight = torch.rand(g.num_edges, generator=gen) if weighted else None
    original, edges = PrunedPropagation.step, []

    def both_paths(self, q, visited, *args):
        n, batch, slot, prio = g.num_nodes, len(heads), visited.slot, visited.prio
        senders = select_senders(visited.keys, prio, n, batch, q.k)
        assert torch.equal(kernel.select_senders(visited.keys, prio, n, batch, q.k), senders)
        want = select_subgraph(
            senders, g, batch, mask, slot, prio, q.const, q.e, weighted, q.pmap.clone()
        )
        out_mask = None if mask is None else mask[g.out_index().edge]
        got = kernel.select_subgraph(
            senders, n, batch, g.out_index(), out_mask, slot, prio, q.const, q.e,
            g.num_relations, weighted,
        )  # fmt: skip
        for a, b in zip((*want[:2], want[3]), (*got[:2], got[3]), strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
        for name in ("indptr", "src", "rel"):
            assert torch.equal(getattr(want[2], name), getattr(got[2], name)), name
        edges.append(want[2].num_edges)
        return original(self, q, visited, *args)

    monkeypatch.setattr(PrunedPropagation, "step", both_paths)
    logits = {}
    for flag in (False, True):
        model.pruned.compiled_select = flag
        with torch.no_grad():
            logits[flag] = model(g, heads, rels, mask, edge_weight=weight)
    assert torch.equal(logits[False], logits[True])
    assert len(edges) == 8
    assert any(e < 120 for e in edges), "the budget must drop some edge"


def test_compiled_subgraph_carries_the_transposed_view():
    """The packed graph from the compiled selection keeps the CPU kernel's source-sorted view
    built in the same pass; it equals the one ``ops.cpu.transposed`` builds by a sort."""
    kernel = _compiled_or_skip()
    g = graph(seed=3, num_nodes=40, num_facts=200)
    gen = torch.Generator().manual_seed(5)
    n, batch = g.num_nodes, 3
    for e in (2, 7, 1000):
        s_keys = torch.sort(torch.randperm(batch * n, generator=gen)[:9]).values
        keys = torch.cat([s_keys, torch.randperm(batch * n, generator=gen)[:20]]).unique()
        slot = torch.full((batch * n,), -1, dtype=torch.int32)
        slot[keys] = torch.arange(keys.numel(), dtype=torch.int32)
        score = torch.randn(keys.numel(), generator=gen)
        const = torch.randn(batch, generator=gen)
        _, _, packed, _ = kernel.select_subgraph(
            s_keys, n, batch, g.out_index(), None, slot, score, const, e, g.num_relations
        )
        view = kernel.transposed(packed)
        assert packed.num_edges > 0 and kernel.transposed(packed) is view  # kept
        packed.invalidate()  # dropped: the next call builds it by a sort
        built = kernel.transposed(packed)
        for got, want in zip(view, built, strict=True):
            assert got is not want and got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dropped", [3, 100])
def test_out_order_mask_equals_the_gather(dropped):
    """The edge mask in out order equals ``mask[out_edge]`` whether it drops a few edges (the
    cleared-ones path through the inverse order) or many (the gather)."""
    from cmpnn_dist.model.pruned_select import out_order_mask

    g = graph(seed=4, num_nodes=30, num_facts=150)
    gen = torch.Generator().manual_seed(dropped)
    mask = torch.ones(g.num_edges, dtype=torch.bool)
    mask[torch.randperm(g.num_edges, generator=gen)[:dropped]] = False
    for _ in range(2):  # the second call reads the kept inverse
        got = out_order_mask(g, mask)
        assert torch.equal(got, mask[g.out_index().edge]) and int((~got).sum()) == dropped
