"""ops.propagate with per-edge float weights: m_e <- w_e m_e before the reduction.

Checked against the unweighted call (weights of one: bit for bit), against edge masking
(weight zero on sum / sumsq), against the naive oracle (values and gradients, the weights'
gradient included) and against finite differences (gradcheck, float64).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import available_impls, propagate, resolve_impl

AGGS = ("sum", "sumsq", "max", "min")
CASES = [("mul", False), ("mul", True), ("basis", False)]


def _graph(seed=0):
    """Random facts, a hub (node 0, 9 in-edges) and isolated nodes 10, 11."""
    rng = np.random.default_rng(seed)
    facts = {
        (int(h), int(r), int(t))
        for h, r, t in zip(
            rng.integers(1, 9, 20), rng.integers(0, 3, 20), rng.integers(1, 9, 20), strict=True
        )
    }
    facts |= {(h, h % 3, 0) for h in range(1, 10)}
    return graph_from_triples(12, 3, np.array(sorted(facts)))


def _relation(message, graph, batch, dim, gen, per_query=False):
    r2 = graph.num_relations
    if message == "mul":
        shape = (batch, r2, dim) if per_query else (r2, dim)
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    bases = torch.randn(2, dim, dim, generator=gen, dtype=torch.float64, requires_grad=True)
    coef = torch.randn(r2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    return (bases, coef)


def _leaves(relation):
    return list(relation) if isinstance(relation, tuple) else [relation]


def _impls():
    """Every impl importable here that accepts weights (fused declines them)."""
    return [i for i in available_impls() if i != "fused"]


def _run(graph, x, relation, message, impl, **kw):
    return propagate(graph, x, relation, message=message, aggregators=AGGS, impl=impl, **kw)


@pytest.mark.parametrize("impl", ["naive", "reference", "scatter"])
@pytest.mark.parametrize("message,per_query", CASES)
@pytest.mark.parametrize("shared", [True, False])
def test_weights_of_one_give_the_unweighted_result_bit_for_bit(impl, message, per_query, shared):
    if impl not in available_impls():
        pytest.skip(f"ops impl {impl!r} is not importable here")
    graph = _graph()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph, 2, 3, gen, per_query)
    mask = torch.rand(graph.num_edges, generator=gen) > 0.2
    ones = torch.ones(graph.num_edges if shared else (2, graph.num_edges), dtype=torch.float64)
    for chunk in (5, 1 << 24):  # hub rows split into pieces, and one block
        plain = _run(graph, x, relation, message, impl, edge_mask=mask, chunk_elements=chunk)
        weighted = _run(
            graph, x, relation, message, impl, edge_mask=mask, edge_weight=ones,
            chunk_elements=chunk,
        )  # fmt: skip
        for key in (*AGGS, "degree"):
            assert torch.equal(plain[key], weighted[key]), (key, chunk)
        leaves = [x, *_leaves(relation)]
        g_plain = torch.autograd.grad(sum(plain[a].sum() for a in AGGS), leaves)
        g_weighted = torch.autograd.grad(sum(weighted[a].sum() for a in AGGS), leaves)
        for a, b in zip(g_plain, g_weighted, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("impl", ["naive", "reference", "scatter"])
@pytest.mark.parametrize("message,per_query", CASES)
def test_zero_weight_equals_masking_the_edge_for_sums(impl, message, per_query):
    """sum and sumsq of a zero-weighted edge's message add exactly 0; max / min see a message
    of value 0 (documented), so only the sums are compared."""
    if impl not in available_impls():
        pytest.skip(f"ops impl {impl!r} is not importable here")
    graph = _graph(seed=1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(12, 2, 3, generator=gen, dtype=torch.float64)
    relation = _relation(message, graph, 2, 3, gen, per_query)
    keep = torch.rand(graph.num_edges, generator=gen) > 0.4
    keep[graph.indptr[0] : graph.indptr[1]] = False  # the hub loses every in-edge
    masked = _run(graph, x, relation, message, impl, edge_mask=keep, chunk_elements=5)
    weighted = _run(graph, x, relation, message, impl, edge_weight=keep.double(), chunk_elements=5)
    for key in ("sum", "sumsq"):
        torch.testing.assert_close(weighted[key], masked[key], rtol=0, atol=0)
    assert masked["sum"][0].abs().max() == 0 and weighted["sum"][0].abs().max() == 0
    # weights do not change the degree: it counts kept edges
    assert torch.equal(weighted["degree"], graph.in_degree().double())


@pytest.mark.parametrize("message,per_query", CASES)
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("chunk_elements", [1, 7 * 2 * 3, 1 << 24])
def test_weighted_reference_matches_naive(message, per_query, shared, chunk_elements):
    graph = _graph(seed=2)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(12, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph, 2, 3, gen, per_query)
    shape = (graph.num_edges,) if shared else (2, graph.num_edges)
    weight = torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(graph.num_edges, generator=gen) > 0.3
    upstream = torch.randn(4, 12, 2, 3, generator=gen, dtype=torch.float64)
    leaves = [x, *_leaves(relation), weight]
    results = {}
    for impl in ("naive", "reference"):
        out = _run(
            graph, x, relation, message, impl, edge_mask=mask, edge_weight=weight,
            chunk_elements=chunk_elements,
        )  # fmt: skip
        loss = sum((out[a] * upstream[i]).sum() for i, a in enumerate(AGGS))
        results[impl] = (out, torch.autograd.grad(loss, leaves))
    (out_n, g_n), (out_r, g_r) = results["naive"], results["reference"]
    for key in (*AGGS, "degree"):
        torch.testing.assert_close(out_r[key], out_n[key])
    for a, b in zip(g_r, g_n, strict=True):
        torch.testing.assert_close(a, b)
    assert g_n[-1][..., ~mask].abs().max() == 0  # removed edges get no weight gradient
    assert g_n[-1][..., mask].abs().min() > 0


@pytest.mark.parametrize("impl", ["naive", "reference"])
@pytest.mark.parametrize("message,per_query", CASES)
@pytest.mark.parametrize("shared", [True, False])
def test_weight_gradient_matches_finite_differences(impl, message, per_query, shared):
    graph = graph_from_triples(
        5, 2, np.array([[0, 0, 1], [2, 1, 1], [1, 0, 3], [3, 1, 0], [4, 0, 1]])
    )
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph, 2, 2, gen, per_query)
    shape = (graph.num_edges,) if shared else (2, graph.num_edges)
    weight = torch.rand(*shape, generator=gen, dtype=torch.float64) + 0.5
    weight.requires_grad_()
    mask = torch.ones(graph.num_edges, dtype=torch.bool)
    mask[0] = False

    def fn(w, x, *rel):
        r = tuple(rel) if message == "basis" else rel[0]
        out = _run(graph, x, r, message, impl, edge_mask=mask, edge_weight=w, chunk_elements=4)
        return tuple(out[a] for a in AGGS)

    assert torch.autograd.gradcheck(fn, (weight, x, *_leaves(relation)))


def test_half_precision_weights_accumulate_in_float32():
    """bfloat16 weights and inputs: the reference result is the float32 one rounded once."""
    graph = _graph(seed=4)
    gen = torch.Generator().manual_seed(4)
    x16 = torch.randn(12, 2, 4, generator=gen).bfloat16()
    rel16 = torch.randn(graph.num_relations, 4, generator=gen).bfloat16()
    w16 = torch.rand(graph.num_edges, generator=gen).bfloat16().requires_grad_()
    w32 = w16.detach().float().requires_grad_()
    out16 = _run(graph, x16, rel16, "mul", "reference", edge_weight=w16)
    out32 = _run(graph, x16.float(), rel16.float(), "mul", "reference", edge_weight=w32)
    for a in AGGS:
        assert out16[a].dtype == torch.bfloat16 and torch.equal(out16[a], out32[a].bfloat16())
    (g16,) = torch.autograd.grad(out16["sum"].float().sum(), [w16])
    (g32,) = torch.autograd.grad(out32["sum"].sum(), [w32])
    assert g16.dtype == torch.bfloat16 and torch.equal(g16, g32.bfloat16())


@pytest.mark.triton
def test_fused_declines_weights():
    """An explicit fused call with weights is a clear error; auto never picks fused for it."""
    with pytest.raises(ValueError, match="fused.*edge_weight"):
        resolve_impl("fused", weighted=True)
    mul_auto = "cpu" if "cpu" in available_impls() else "reference"  # the compiled kernel
    assert resolve_impl("auto", torch.zeros(1), weighted=True) == mul_auto
    graph = _graph()
    x = torch.zeros(12, 1, 2)
    rel = torch.zeros(graph.num_relations, 2)
    with pytest.raises(ValueError, match="fused.*edge_weight"):
        propagate(graph, x, rel, message="mul", aggregators=["sum"], impl="fused",
                  edge_weight=torch.ones(graph.num_edges))  # fmt: skip
    with pytest.raises(ValueError, match="edge_weight must be float"):
        propagate(graph, x, rel, message="mul", aggregators=["sum"],
                  edge_weight=torch.ones(3))  # fmt: skip
    with pytest.raises(ValueError, match="edge_weight must be float"):
        propagate(graph, x, rel, message="mul", aggregators=["sum"],
                  edge_weight=torch.ones(graph.num_edges, dtype=torch.long))  # fmt: skip


@pytest.mark.triton
@pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="the fused kernels need CUDA or TRITON_INTERPRET=1",
)
def test_fused_module_rejects_weights_directly():
    """Called directly (not through the dispatcher) the Triton module also refuses weights."""
    pytest.importorskip("triton")
    from cmpnn_dist.ops import triton_mp

    graph = _graph()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.zeros(12, 1, 2, device=dev)
    rel = torch.zeros(graph.num_relations, 2, device=dev)
    with pytest.raises(ValueError, match="edge_weight"):
        triton_mp.propagate(graph.to(dev), x, rel, message="mul", aggregators=("sum",),
                            edge_weight=torch.ones(graph.num_edges, device=dev))  # fmt: skip
