"""ops: the chunked reference implementation against the naive oracle (values and gradients)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import available_impls, propagate, resolve_impl
from cmpnn_dist.ops.vectorized import make_blocks
from tests.helpers.graphs import hub_graph

AGGS = ("sum", "sumsq", "max", "min")


def _relation(message, graph, batch, dim, gen, per_query=False, num_bases=2):
    r2 = graph.num_relations
    if message == "mul":
        shape = (batch, r2, dim) if per_query else (r2, dim)
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    bases = torch.randn(num_bases, dim, dim, generator=gen, dtype=torch.float64)
    coef = torch.randn(r2, num_bases, generator=gen, dtype=torch.float64)
    return (bases.requires_grad_(), coef.requires_grad_())


def _leaves(relation):
    return list(relation) if isinstance(relation, tuple) else [relation]


CASES = [("mul", False), ("mul", True), ("basis", False)]


@pytest.mark.parametrize("message,per_query", CASES)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk_elements", [1, 7 * 2 * 3, 1 << 24])
def test_reference_matches_naive_values_and_gradients(message, per_query, masked, chunk_elements):
    graph = hub_graph()
    batch, dim = 2, 3
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(graph.num_nodes, batch, dim, generator=gen, dtype=torch.float64)
    x.requires_grad_()
    relation = _relation(message, graph, batch, dim, gen, per_query)
    mask = None
    if masked:
        mask = torch.rand(graph.num_edges, generator=gen) > 0.3
        mask[graph.indptr[5] : graph.indptr[6]] = False  # node 5 loses every in-edge
    outs = {}
    grads = {}
    for impl in ("naive", "reference"):
        res = propagate(
            graph,
            x,
            relation,
            message=message,
            aggregators=AGGS,
            edge_mask=mask,
            impl=impl,
            chunk_elements=chunk_elements,
        )
        weights = torch.randn(
            4, *x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64
        )
        loss = sum((res[a] * weights[i]).sum() for i, a in enumerate(AGGS))
        grads[impl] = torch.autograd.grad(loss, [x, *_leaves(relation)])
        outs[impl] = res
    for key in (*AGGS, "degree"):
        torch.testing.assert_close(outs["reference"][key], outs["naive"][key])
    for g_ref, g_naive in zip(grads["reference"], grads["naive"], strict=True):
        torch.testing.assert_close(g_ref, g_naive)
    # isolated nodes 10, 11 (and masked-out node 5) get exactly 0 and degree 0
    dead = [10, 11, 5] if masked else [10, 11]
    for key in AGGS:
        assert torch.all(outs["reference"][key][dead] == 0)
    assert torch.all(outs["reference"]["degree"][dead] == 0)
    # the hub really is a hub, and degree counts kept in-edges
    deg = outs["naive"]["degree"]
    expect = torch.bincount(graph.dst()[mask] if masked else graph.dst(), minlength=12)
    torch.testing.assert_close(deg, expect.double())
    assert int(graph.in_degree()[0]) >= 9


@pytest.mark.parametrize("message,per_query", CASES)
def test_reference_gradcheck(message, per_query):
    graph = graph_from_triples(5, 2, np.array([[0, 0, 1], [2, 1, 1], [1, 0, 3], [3, 1, 0]]))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph, 2, 2, gen, per_query)
    mask = torch.ones(graph.num_edges, dtype=torch.bool)
    mask[0] = False

    def fn(x, *rel):
        r = tuple(rel) if message == "basis" else rel[0]
        res = propagate(
            graph,
            x,
            r,
            message=message,
            aggregators=AGGS,
            edge_mask=mask,
            impl="reference",
            chunk_elements=4,
        )
        return tuple(res[a] for a in AGGS)

    assert torch.autograd.gradcheck(fn, (x, *_leaves(relation)))


def test_make_blocks_respects_budget_and_splits_hubs():
    indptr = np.array([0, 2, 3, 3, 13, 14, 16])  # row 3 has 10 in-edges
    blocks = make_blocks(indptr, 4)
    rows = [r for r0, r1, _ in blocks for r in range(r0, r1)]
    assert rows == list(range(6))  # contiguous cover, in order
    for r0, r1, pieces in blocks:
        assert pieces[0][0] == indptr[r0] and pieces[-1][1] == indptr[r1]
        for e0, e1 in pieces:
            assert e1 - e0 <= 4
        if len(pieces) > 1:
            assert r1 - r0 == 1  # only a hub row is split
    assert [p for r0, _, p in blocks if r0 == 3][0] == [(3, 7), (7, 11), (11, 13)]


def test_reference_never_materialises_all_messages():
    """With a small chunk, no op creates a tensor of |E| x B x d entries, forward or backward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Biggest(TorchDispatchMode):
        size = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else [out]:
                if isinstance(t, torch.Tensor):
                    Biggest.size = max(Biggest.size, t.numel())
            return out

    graph = hub_graph(seed=4)
    batch, dim = 3, 4
    x = torch.randn(graph.num_nodes, batch, dim, requires_grad=True)
    full = graph.num_edges * batch * dim
    for message in ("mul", "basis"):
        rel = _relation(message, graph, batch, dim, torch.Generator().manual_seed(0))
        rel = tuple(r.float() for r in rel) if message == "basis" else rel.float()
        for impl, small in (("naive", False), ("reference", True)):
            Biggest.size = 0
            with Biggest():
                res = propagate(
                    graph,
                    x,
                    rel,
                    message=message,
                    aggregators=AGGS,
                    impl=impl,
                    chunk_elements=batch * dim * 8,
                )
                sum(v.sum() for k, v in res.items() if k != "degree").backward()
            assert (Biggest.size < full // 2) == small, (message, impl, Biggest.size, full)


def test_impl_registry():
    assert {"naive", "reference"} <= set(available_impls())
    mul_auto = "cpu" if "cpu" in available_impls() else "reference"  # the compiled kernel
    assert resolve_impl("auto", torch.zeros(1)) == mul_auto
    with pytest.raises(ValueError, match="bogus.*naive"):
        resolve_impl("bogus")
    graph = hub_graph()
    x = torch.zeros(graph.num_nodes, 1, 2)
    with pytest.raises(ValueError, match="relation must be"):
        propagate(graph, x, torch.zeros(3, 2), message="mul", aggregators=["sum"])
    with pytest.raises(ValueError, match="aggregators"):
        propagate(
            graph, x, torch.zeros(graph.num_relations, 2), message="mul", aggregators=["mean"]
        )


@pytest.mark.parametrize("message,per_query", CASES)
def test_reference_matches_naive_with_tied_messages(message, per_query):
    """Zero source states (as in h^(0)) make many messages tie in max / min: the gradient is
    shared evenly between tied edges in both implementations."""
    graph = hub_graph(seed=5)
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(graph.num_nodes, 2, 3, generator=gen, dtype=torch.float64)
    x[2:] = 0.0
    x[0, 0, :2] = 0.0
    x.requires_grad_()
    relation = _relation(message, graph, 2, 3, gen, per_query)
    grads = []
    for impl in ("naive", "reference"):
        res = propagate(
            graph,
            x,
            relation,
            message=message,
            aggregators=("max", "min", "sumsq"),
            impl=impl,
            chunk_elements=1,
        )
        loss = (res["max"] * 1.5 - res["min"] * 0.5).sum() + res["sumsq"].sum()
        grads.append(torch.autograd.grad(loss, [x, *_leaves(relation)]))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
    assert grads[0][0].abs().sum() > 0


@pytest.mark.parametrize("message", ["mul", "basis"])
def test_reference_half_precision_accumulates_in_float32(message):
    """bfloat16 in and out, float32 inside: outputs and gradients are the float32 computation
    on the same values rounded once, bit for bit (a hub of ~2,000 in-edges included)."""
    rng = np.random.default_rng(5)
    n, r = 60, 2
    facts = np.stack([rng.integers(1, n, 2000), rng.integers(0, r, 2000), np.zeros(2000, int)], 1)
    g = graph_from_triples(n, r, np.unique(facts, axis=0))
    gen = torch.Generator().manual_seed(0)
    x16 = torch.randn(n, 2, 4, generator=gen).bfloat16().requires_grad_()
    rel = _relation(message, g, 2, 4, gen)
    rel16 = tuple(t.detach().bfloat16().requires_grad_() for t in _leaves(rel))
    rel16 = rel16 if message == "basis" else rel16[0]
    x32 = x16.detach().float().requires_grad_()
    rel32 = tuple(t.detach().float().requires_grad_() for t in _leaves(rel16))
    rel32 = rel32 if message == "basis" else rel32[0]

    out16 = propagate(g, x16, rel16, message=message, aggregators=AGGS, impl="reference")
    out32 = propagate(g, x32, rel32, message=message, aggregators=AGGS, impl="reference")
    for a in AGGS:
        assert out16[a].dtype == torch.bfloat16
        assert torch.equal(out16[a], out32[a].bfloat16()), a
    leaves16, leaves32 = [x16, *_leaves(rel16)], [x32, *_leaves(rel32)]
    g16 = torch.autograd.grad(out16["sum"].float().sum(), leaves16)
    g32 = torch.autograd.grad(out32["sum"].float().sum(), leaves32)
    for a, b in zip(g16, g32, strict=True):
        assert a.dtype == torch.bfloat16 and torch.equal(a, b.bfloat16())
