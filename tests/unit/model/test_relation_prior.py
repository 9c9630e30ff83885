"""model.prune.unvisited=relations: the score of candidates a pruned model never visits, against
a loop over each node's edges and in-neighbours; visited candidates and the dense limit
unchanged; the query pair's removed edges not counted; gradients for DDP; the evaluation cache."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from cmpnn_dist.config import OpsConfig, PruneConfig
from cmpnn_dist.evaluation.ranking import tied_rank
from cmpnn_dist.model import CMPNN
from cmpnn_dist.model.relation_prior import relation_profile
from tests.helpers.pruned import (
    NUM_REL,
    QUERIES,
    cfg_of,
    cli_error_lines,
    design_space,
    graph,
    pair,
    slow_pruned,
)

SMALL = dict(max_nodes=1, max_edges=1, unvisited="relations")


def _with_weight(model, seed: int = 3):
    torch.manual_seed(seed)
    with torch.no_grad():
        model.pruned.unvisited.weight.normal_()
    return model


def _hand_embed(g, prior, mask=None) -> list[torch.Tensor]:
    """e^(K)_v of every node by loops over its kept in-edges (the module docstring's
    equations)."""
    n, r2 = g.num_nodes, g.num_relations
    src, dst, rel = g.src.tolist(), g.dst().tolist(), g.rel.tolist()
    kept = [i for i in range(g.num_edges) if mask is None or bool(mask[i])]
    u1, a1 = prior.profile.weight.detach(), prior.profile.bias.detach()
    e = []
    for v in range(n):
        counts = torch.zeros(r2, dtype=u1.dtype)
        for i in kept:
            if dst[i] == v:
                counts[rel[i]] += 1
        e.append(torch.relu(u1 @ torch.log1p(counts) + a1))
    for layer in prior.neighbours:
        u, a = layer.weight.detach(), layer.bias.detach()
        nxt = []
        for v in range(n):
            into = [src[i] for i in kept if dst[i] == v]
            mean = sum((e[w] for w in into), torch.zeros_like(a)) / max(len(into), 1)
            nxt.append(e[v] + torch.relu(u @ mean + a))
        e = nxt
    return e


def _constant_twin(model):
    """The same parameters with unvisited=constant (A*Net's scores)."""
    cfg = dataclasses.replace(
        model.cfg, prune=dataclasses.replace(model.cfg.prune, unvisited="constant")
    )
    twin = type(model)(cfg, model.num_relations, model.ops).double()
    state = {k: v for k, v in model.state_dict().items() if ".unvisited." not in k}
    twin.load_state_dict(state)
    return twin.eval()


@pytest.mark.parametrize("masked,hops", [(False, 2), (True, 2), (True, 1), (False, 3)])
def test_unvisited_candidates_score_their_relations(masked, hops):
    g = graph(seed=2, num_nodes=30, num_facts=50)
    mask = None
    if masked:
        mask = torch.ones(g.num_edges, dtype=torch.bool)
        mask[::4] = False
    model = _with_weight(pair(cfg_of(dict(SMALL, unvisited_hops=hops)), seed=0)[0].eval())
    assert len(model.pruned.unvisited.neighbours) == hops - 1
    twin = _constant_twin(model)
    heads, rels = torch.tensor([0, 1]), torch.tensor([0, 3])
    with torch.no_grad():
        scores = model(g, heads, rels, edge_mask=mask)
        plain = twin(g, heads, rels, edge_mask=mask)
        const = model.decoder(torch.zeros(2, 1, 8, dtype=scores.dtype), model.query(rels))
    prior = model.pruned.unvisited
    embed = _hand_embed(g, prior, mask)
    for b in range(2):
        # unvisited: A*Net's constant score (the slow reference's set where nothing is masked)
        unvisited = [v for v in range(g.num_nodes) if plain[b, v] == const[b, 0]]
        if mask is None:
            assert unvisited == slow_pruned(twin, g, int(heads[b]), int(rels[b]))[1]
        assert len(unvisited) > 20
        visited = [v for v in range(g.num_nodes) if v not in unvisited]
        assert torch.equal(scores[b, visited], plain[b, visited])  # visited: unchanged
        for v in unvisited:
            want = float(const[b, 0]) + float(prior.weight[int(rels[b])].detach() @ embed[v])
            assert math.isclose(float(scores[b, v]), want, rel_tol=1e-9, abs_tol=1e-12), v
        # the unvisited scores are not one constant
        assert len({float(scores[b, v]) for v in unvisited}) > 3


def test_a_removed_edge_does_not_tell_its_answer():
    """Training removes the query pair's edges (edge_mask): the prior must not count them, or
    the answer of (u, q, v) would be told by its own q-edge into v."""
    g = graph(seed=4, num_nodes=12, num_facts=30)
    edge = 5
    v, r = int(g.dst()[edge]), int(g.rel[edge])
    mask = torch.ones(g.num_edges, dtype=torch.bool)
    mask[edge] = False
    full = relation_profile(g, None, torch.float64).to_dense()
    cut = relation_profile(g, mask, torch.float64).to_dense()
    n = int(((g.dst() == v) & (g.rel == r)).sum())
    assert math.isclose(float(full[v, r]), math.log1p(n))
    assert math.isclose(float(cut[v, r]), math.log1p(n - 1))
    full[v, r] = cut[v, r]
    assert torch.equal(full, cut)  # nothing else moved


def test_a_run_starts_from_the_constant_scores():
    """W starts at zero: the first forward is A*Net's (unvisited=constant)."""
    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = pair(cfg_of(SMALL), seed=1)[0].eval()
    assert not model.pruned.unvisited.weight.any()
    with torch.no_grad():
        assert torch.equal(model(g, *QUERIES), _constant_twin(model)(g, *QUERIES))


def test_keep_everything_is_still_the_dense_model():
    g = graph()
    for kw in design_space()[:12]:
        pruned, dense = pair(cfg_of(dict(node_ratio=1.0, unvisited="relations"), **kw))
        _with_weight(pruned)
        torch.manual_seed(5)
        got = pruned.eval()(g, *QUERIES)
        torch.manual_seed(5)
        want = dense.eval()(g, *QUERIES)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-10), kw


@pytest.mark.parametrize("ratio", [0.2, 1.0])
def test_the_prior_gets_a_gradient_in_every_step(ratio):
    """DDP runs with find_unused_parameters=False; the gradient of W is the loss's."""
    g = graph(seed=1, num_nodes=24, num_facts=30)
    model = _with_weight(pair(cfg_of(dict(node_ratio=ratio, unvisited="relations")), seed=0)[0])
    heads, rels = torch.tensor([0, 5]), torch.tensor([1, 2])
    logits = model(g, heads, rels)
    logits.sum().backward()
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    assert not unused
    grad = model.pruned.unvisited.weight.grad
    if ratio == 1.0:  # every node visited: the prior is never a score
        assert not grad.any()
        return
    assert grad.abs().sum() > 0
    # d(sum of logits)/dW[q] = sum over unvisited v of e'_v, by hand (distinct q per query)
    twin = _constant_twin(model)
    embed = _hand_embed(g, model.pruned.unvisited)
    for head, rel in zip(heads.tolist(), rels.tolist(), strict=True):
        _, unvisited = slow_pruned(twin, g, head, rel)
        want = sum((embed[v] for v in unvisited), torch.zeros_like(embed[0]))
        assert torch.allclose(grad[rel], want, rtol=1e-9, atol=1e-12), rel
    assert model.pruned.unvisited.profile.weight.grad.abs().sum() > 0  # W != 0: U_1 learns


def test_same_relations_still_tie_under_the_rule():
    g = graph(seed=2, num_nodes=40, num_facts=20)
    model = _with_weight(pair(cfg_of(SMALL), seed=0)[0].eval())
    with torch.no_grad():
        scores = model(g, torch.tensor([0]), torch.tensor([0]))[0]
    _, unvisited = slow_pruned(_constant_twin(model), g, 0, 0)
    isolated = [v for v in unvisited if int((g.dst() == v).sum()) == 0]  # profile: none
    assert len(isolated) >= 2
    target = isolated[0]
    greater = int((scores > scores[target]).sum())
    equal = int((scores == scores[target]).sum()) - 1
    assert equal >= len(isolated) - 1
    pess = tied_rank(torch.tensor([greater]), torch.tensor([equal]), "pessimistic")
    assert int(pess) == greater + 1 + equal


def test_unknown_unvisited_kind_is_refused():
    from cmpnn_dist.config import validate_section

    with pytest.raises(ValueError, match=r"'nearest' for model\.prune\.unvisited.*relations"):
        validate_section(PruneConfig(unvisited="nearest"), "model.prune.")
    with pytest.raises(ValueError, match=r"model\.prune\.unvisited_hops"):
        validate_section(PruneConfig(unvisited_hops=0), "model.prune.")


def test_evaluation_caches_the_embedding_until_a_parameter_moves():
    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = _with_weight(pair(cfg_of(SMALL), seed=0)[0].eval())
    prior = model.pruned.unvisited
    with torch.no_grad():
        first = model(g, *QUERIES)
        cached = prior.eval_cache.embedding
        assert torch.equal(model(g, *QUERIES), first)
        assert prior.eval_cache.embedding is cached
        prior.neighbours[0].bias.add_(0.5)  # an optimizer step
        moved = model(g, *QUERIES)
    assert prior.eval_cache.embedding is not cached
    assert torch.equal(moved, model(g, *QUERIES))  # with autograd: computed afresh, the same
    assert not torch.equal(moved, first)
    prior.profile.weight.data = prior.profile.weight.data * 2  # replaced, not updated in place
    with torch.no_grad():
        replaced = model(g, *QUERIES)
    assert torch.equal(replaced, model(g, *QUERIES)) and not torch.equal(replaced, moved)
    other = _with_weight(pair(cfg_of(SMALL), seed=1)[0].eval())  # another model, same graph
    with torch.no_grad():
        got = other(g, *QUERIES)
    assert torch.equal(got, other(g, *QUERIES))  # not the first model's cached embedding


def test_the_visited_answers_match_the_slow_reference():
    """``answers_visited`` (the split of ``benchmarks/studies/pruned_unvisited.py``): which
    answers a pruned model visits, with the prior on."""
    from cmpnn_dist.model.pruned_visits import answers_visited

    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = _with_weight(pair(cfg_of(SMALL), seed=0)[0].eval())
    prior = model.pruned.unvisited
    n = g.num_nodes
    for head, rel in ((0, 0), (1, 3)):
        got = answers_visited(
            model, g, torch.full((n,), head), torch.full((n,), rel), torch.arange(n)
        )
        _, unvisited = slow_pruned(_constant_twin(model), g, head, rel)
        assert [v for v in range(n) if not got[v]] == unvisited
    assert model.pruned.unvisited is prior  # switched back on


def test_checkpoints_of_the_first_two_hop_prior_load():
    """A state dict whose one extra hop is a single Linear ``neighbours`` (not a one-element
    list) loads into today's module with the same scores."""
    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = _with_weight(pair(cfg_of(SMALL), seed=0)[0].eval())
    state = model.state_dict()
    for name in ("weight", "bias"):
        state[f"pruned.unvisited.neighbours.{name}"] = state.pop(
            f"pruned.unvisited.neighbours.0.{name}"
        )
    fresh = pair(cfg_of(SMALL), seed=1)[0].eval()
    fresh.load_state_dict(state)
    with torch.no_grad():
        assert torch.equal(fresh(g, *QUERIES), model(g, *QUERIES))


# model.prior=relations: the prior on every candidate, dense and pruned alike


def _prior_model(prune: dict | None = None, propagation: str = "pruned", seed: int = 0, **kw):
    """A model with model.prior=relations (W drawn, so the prior is not zero)."""
    cfg = dataclasses.replace(cfg_of(prune, **kw), prior="relations", propagation=propagation)
    torch.manual_seed(seed)
    model = CMPNN(cfg, NUM_REL, OpsConfig(impl="reference", chunk_elements=1 << 16)).double()
    with torch.no_grad():
        model.prior.weight.normal_()
    return model.eval()


def _without_prior(model):
    """The same parameters without model.prior."""
    cfg = dataclasses.replace(model.cfg, prior="none")
    twin = type(model)(cfg, model.num_relations, model.ops).double()
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("prior.")}
    twin.load_state_dict(state)
    return twin.eval()


@pytest.mark.parametrize("masked", [False, True])
def test_dense_model_with_the_prior_adds_it_to_every_candidate(masked):
    g = graph(seed=2, num_nodes=30, num_facts=50)
    mask = None
    if masked:
        mask = torch.ones(g.num_edges, dtype=torch.bool)
        mask[::3] = False
    model = _prior_model(propagation="dense")
    plain = _without_prior(model)
    heads, rels = torch.tensor([0, 1, 7]), torch.tensor([0, 3, 5])
    with torch.no_grad():
        got = model(g, heads, rels, edge_mask=mask)
        base = plain(g, heads, rels, edge_mask=mask)
    embed = _hand_embed(g, model.prior, mask)
    for b in range(3):
        w = model.prior.weight[int(rels[b])].detach()
        for v in range(g.num_nodes):
            want = float(base[b, v]) + float(w @ embed[v])
            assert math.isclose(float(got[b, v]), want, rel_tol=1e-9, abs_tol=1e-12), (b, v)


def test_pruned_model_with_the_prior_adds_it_to_visited_and_unvisited():
    """Visited: the slow reference's logits plus the prior; unvisited: decoder(0, z_q) plus the
    prior; the subgraph is the one without the prior (the prior does not choose it)."""
    g = graph(seed=2, num_nodes=30, num_facts=50)
    model = _prior_model(dict(max_nodes=1, max_edges=1))
    heads, rels = torch.tensor([0, 1]), torch.tensor([0, 3])
    with torch.no_grad():
        got = model(g, heads, rels)
        const = model.decoder(torch.zeros(2, 1, 8, dtype=got.dtype), model.query(rels))
    embed = _hand_embed(g, model.prior)
    for b in range(2):
        want, unvisited = slow_pruned(model, g, int(heads[b]), int(rels[b]))
        assert len(unvisited) > 20
        w = model.prior.weight[int(rels[b])].detach()
        for v in range(g.num_nodes):
            base = float(const[b, 0]) if v in unvisited else float(want[v].detach())
            expect = base + float(w @ embed[v])
            assert math.isclose(float(got[b, v]), expect, rel_tol=1e-9, abs_tol=1e-12), (b, v)


def test_keep_everything_with_the_prior_is_the_dense_model_with_the_prior():
    g = graph()
    for kw in design_space()[:12]:
        pruned = _prior_model(dict(node_ratio=1.0), seed=1, **kw)
        dense = CMPNN(
            dataclasses.replace(pruned.cfg, propagation="dense"), NUM_REL, pruned.ops
        ).double()
        dense.load_state_dict(pruned.state_dict())
        torch.manual_seed(5)
        got = pruned(g, *QUERIES)
        torch.manual_seed(5)
        want = dense.eval()(g, *QUERIES)
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-10), kw


@pytest.mark.parametrize("propagation", ["dense", "pruned"])
def test_every_parameter_gets_a_gradient_with_the_prior(propagation):
    g = graph(seed=1, num_nodes=24, num_facts=30)
    model = _prior_model(dict(node_ratio=0.2), propagation=propagation).train()
    model(g, torch.tensor([0, 5]), torch.tensor([1, 2])).sum().backward()
    assert not [n for n, p in model.named_parameters() if p.grad is None]
    assert model.prior.weight.grad.abs().sum() > 0


def test_two_priors_on_the_unvisited_candidates_are_refused():
    cfg = dataclasses.replace(cfg_of(dict(unvisited="relations")), prior="relations")
    with pytest.raises(ValueError, match=r"model\.prior=relations .*model\.prune\.unvisited"):
        CMPNN(cfg, NUM_REL)


@pytest.mark.integration
def test_a_double_prior_is_one_error_line_from_the_cli(tmp_path):
    overrides = ("model.propagation=pruned", "model.prune.unvisited=relations")
    assert cli_error_lines(tmp_path, *overrides, "model.prior=relations") == [
        "error: model.prior=relations already scores every candidate: "
        "model.prune.unvisited=relations would add a second prior to the unvisited ones "
        "(use model.prune.unvisited=constant)"
    ]
