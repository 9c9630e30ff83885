"""Message functions as a registry: TransE / RotatE through every impl that claims them and
through the generic path, against the naive oracle and hand-written per-edge formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import cmpnn_dist.model.messages  # noqa: F401  (registers transe, rotate)
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import (
    COVERAGE,
    EdgeMessage,
    available_impls,
    covers,
    message_names,
    propagate,
    resolve_impl,
)
from cmpnn_dist.ops.naive import messages

AGGS = ("sum", "sumsq", "max", "min")


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


def _relation(message, r2, batch, dim, gen, per_query):
    """Random float64 relation parameters of ``message`` (leaves requiring grad)."""

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)

    lead = (batch,) if per_query else ()
    if message in ("mul", "transe"):
        return rand(*lead, r2, dim)
    if message == "rotate":
        return rand(*lead, r2, dim // 2)
    return (rand(2, dim, dim), rand(r2, 2))  # basis


def _leaves(relation):
    return list(relation) if isinstance(relation, tuple) else [relation]


@pytest.mark.triton
def test_registry_names_and_coverage():
    assert {"mul", "basis", "transe", "rotate"} <= set(message_names())
    assert covers("reference", "transe") and covers("generic", "rotate", weighted=True)
    assert not covers("fused", "transe") and covers("fused", "mul")
    assert COVERAGE["fused"] == (("mul", "basis"), False)
    # auto: fast reference code for mul / basis, the generic path for the others
    x = torch.zeros(1)
    mul_auto = "cpu" if "cpu" in available_impls() else "reference"  # the compiled kernel
    assert resolve_impl("auto", x, message="mul") == mul_auto
    assert resolve_impl("auto", x, message="basis") == "reference"
    assert resolve_impl("auto", x, message="transe") == "generic"
    assert resolve_impl("auto", x, message="rotate", weighted=True) == "generic"
    with pytest.raises(ValueError, match="'fused' does not support message 'transe'.*mul, basis"):
        resolve_impl("fused", message="transe")
    graph = _graph()
    with pytest.raises(ValueError, match="unknown message 'bogus'.*transe"):
        propagate(graph, torch.zeros(12, 1, 2), torch.zeros(6, 2), message="bogus",
                  aggregators=["sum"])  # fmt: skip
    with pytest.raises(ValueError, match="even hidden dim"):
        propagate(graph, torch.zeros(12, 1, 3), torch.zeros(6, 1), message="rotate",
                  aggregators=["sum"])  # fmt: skip
    with pytest.raises(ValueError, match=r"relation must be \[R2=6, 1\]"):
        propagate(graph, torch.zeros(12, 1, 2), torch.zeros(6, 2), message="rotate",
                  aggregators=["sum"])  # fmt: skip


@pytest.mark.parametrize("per_query", [False, True])
def test_transe_and_rotate_per_edge_formulas(per_query):
    """``compute`` against one-edge-at-a-time formulas: TransE x + r, RotatE as complex
    multiplication by e^{i theta} (torch.complex), which keeps every coordinate's modulus."""
    gen = torch.Generator().manual_seed(0)
    n, b, d, r2 = 7, 2, 6, 4
    x = torch.randn(n, b, d, generator=gen, dtype=torch.float64)
    rel = torch.randint(0, r2, (n,), generator=gen)
    for name in ("transe", "rotate"):
        p = _relation(name, r2, b, d, gen, per_query).detach()
        out = messages(x, rel, p, name)
        for e in range(n):
            for q in range(b):
                row = p[q, rel[e]] if per_query else p[rel[e]]
                if name == "transe":
                    expect = x[e, q] + row
                else:
                    z = torch.complex(x[e, q, : d // 2], x[e, q, d // 2 :]) * torch.polar(
                        torch.ones_like(row), row
                    )
                    expect = torch.cat([z.real, z.imag])
                    mod = out[e, q, : d // 2] ** 2 + out[e, q, d // 2 :] ** 2
                    torch.testing.assert_close(mod, x[e, q, : d // 2] ** 2 + x[e, q, d // 2 :] ** 2)
                torch.testing.assert_close(out[e, q], expect)


def _claiming_impls(message, weighted=False):
    return [i for i in available_impls() if covers(i, message, weighted) and i != "naive"]


CASES = [(m, q) for m in ("transe", "rotate", "mul") for q in (False, True)] + [("basis", False)]


@pytest.mark.parametrize("message,per_query", CASES)
@pytest.mark.parametrize("masked,weighted", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("chunk_elements", [1, 7 * 2 * 4, 1 << 24])
def test_every_claiming_impl_matches_naive(message, per_query, masked, weighted, chunk_elements):
    """Values and gradients (x, relation parameters, edge weights) of every impl that covers
    the message -- reference, generic, scatter where importable -- equal the naive oracle;
    chunk 1 splits the hub row into one-edge pieces."""
    graph = _graph(seed=1)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(12, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph.num_relations, 2, 4, gen, per_query)
    mask = weight = None
    if masked:
        mask = torch.rand(graph.num_edges, generator=gen) > 0.3
        mask[graph.indptr[5] : graph.indptr[6]] = False
    if weighted:
        weight = torch.randn(graph.num_edges, generator=gen, dtype=torch.float64)
        weight.requires_grad_()
    upstream = torch.randn(4, 12, 2, 4, generator=gen, dtype=torch.float64)
    leaves = [x, *_leaves(relation)] + ([weight] if weighted else [])

    def run(impl):
        out = propagate(
            graph, x, relation, message=message, aggregators=AGGS, edge_mask=mask,
            edge_weight=weight, impl=impl, chunk_elements=chunk_elements,
        )  # fmt: skip
        loss = sum((out[a] * upstream[i]).sum() for i, a in enumerate(AGGS))
        return out, torch.autograd.grad(loss, leaves)

    oracle, oracle_grads = run("naive")
    impls = _claiming_impls(message, weighted)
    assert {"reference", "generic"} <= set(impls)
    for impl in impls:
        out, grads = run(impl)
        for key in (*AGGS, "degree"):
            torch.testing.assert_close(out[key], oracle[key], msg=f"{impl} {key}")
        for a, b in zip(grads, oracle_grads, strict=True):
            torch.testing.assert_close(a, b, msg=f"{impl} gradient")
    assert all(g.abs().max() > 0 for g in oracle_grads)


@pytest.mark.parametrize("message", ["transe", "rotate", "mul", "basis"])
def test_generic_gradcheck(message):
    graph = graph_from_triples(
        5, 2, np.array([[0, 0, 1], [2, 1, 1], [1, 0, 3], [3, 1, 0], [4, 0, 1]])
    )
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 2, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    relation = _relation(message, graph.num_relations, 2, 2, gen, message != "basis")
    weight = torch.rand(graph.num_edges, generator=gen, dtype=torch.float64) + 0.5
    weight.requires_grad_()

    def fn(x, w, *rel):
        r = tuple(rel) if message == "basis" else rel[0]
        out = propagate(graph, x, r, message=message, aggregators=AGGS, edge_weight=w,
                        impl="generic", chunk_elements=4)  # fmt: skip
        return tuple(out[a] for a in AGGS)

    assert torch.autograd.gradcheck(fn, (x, weight, *_leaves(relation)))


@pytest.mark.triton
def test_fused_does_not_claim_transe_or_rotate():
    graph = _graph()
    x = torch.zeros(12, 1, 2)
    for name, width in (("transe", 2), ("rotate", 1)):
        with pytest.raises(ValueError, match=f"'fused' does not support message '{name}'"):
            propagate(graph, x, torch.zeros(graph.num_relations, width), message=name,
                      aggregators=["sum"], impl="fused")  # fmt: skip


def test_generic_never_materialises_all_messages():
    """With a small chunk the generic path holds at most a few pieces of messages, forward and
    backward (autograd through the message function included), never |E| x B x d."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Biggest(TorchDispatchMode):
        size = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else [out]:
                if isinstance(t, torch.Tensor):
                    Biggest.size = max(Biggest.size, t.numel())
            return out

    graph = _graph(seed=4)
    batch, dim = 3, 4
    full = graph.num_edges * batch * dim
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(graph.num_nodes, batch, dim, requires_grad=True)
    for message in ("transe", "rotate"):
        rel = _relation(message, graph.num_relations, batch, dim, gen, True)
        for impl, small in (("naive", False), ("generic", True)):
            Biggest.size = 0
            with Biggest():
                res = propagate(graph, x, rel.float(), message=message, aggregators=AGGS,
                                impl=impl, chunk_elements=batch * dim * 8)  # fmt: skip
                sum(v.sum() for k, v in res.items() if k != "degree").backward()
            assert (Biggest.size < full // 2) == small, (message, impl, Biggest.size, full)


@pytest.mark.triton
def test_an_unregistered_message_object_runs_on_naive_and_generic():
    """The protocol is all a new message needs: an EdgeMessage object passed directly."""

    def compute(x_src, rel, params):
        return torch.tanh(x_src) * params[0][rel].unsqueeze(1) + params[1][rel].unsqueeze(1)

    def check(params, r2, batch, dim):
        if [tuple(p.shape) for p in params] != [(r2, dim)] * 2:
            raise ValueError("scale_shift needs (scale [R2, d], shift [R2, d])")

    custom = EdgeMessage("scale_shift", compute, check)
    graph = _graph(seed=5)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(12, 2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    rel = tuple(
        torch.randn(graph.num_relations, 3, generator=gen, dtype=torch.float64).requires_grad_()
        for _ in range(2)
    )
    outs = []
    for impl in ("naive", "generic", "auto"):
        out = propagate(graph, x, rel, message=custom, aggregators=AGGS, impl=impl,
                        chunk_elements=6)  # fmt: skip
        loss = sum(out[a].sum() * (i + 1) for i, a in enumerate(AGGS))
        outs.append((out, torch.autograd.grad(loss, [x, *rel])))
    for out, grads in outs[1:]:
        for a in AGGS:
            torch.testing.assert_close(out[a], outs[0][0][a])
        for g, g0 in zip(grads, outs[0][1], strict=True):
            torch.testing.assert_close(g, g0)
    with pytest.raises(ValueError, match="scale_shift needs"):
        propagate(graph, x, rel[:1], message=custom, aggregators=AGGS)
    with pytest.raises(ValueError, match="'fused' does not support"):
        propagate(graph, x, rel, message=custom, aggregators=AGGS, impl="fused")


@pytest.mark.parametrize("message", ["transe", "rotate"])
def test_generic_half_precision_is_float32_rounded_once(message):
    graph = _graph(seed=6)
    gen = torch.Generator().manual_seed(6)
    x16 = torch.randn(12, 2, 4, generator=gen).bfloat16()
    rel16 = _relation(message, graph.num_relations, 2, 4, gen, True).detach().bfloat16()
    out16 = propagate(graph, x16, rel16, message=message, aggregators=AGGS, impl="generic")
    out32 = propagate(graph, x16.float(), rel16.float(), message=message, aggregators=AGGS,
                      impl="generic")  # fmt: skip
    for a in AGGS:
        assert out16[a].dtype == torch.bfloat16 and torch.equal(out16[a], out32[a].bfloat16())
