"""ops impl=cpu (the compiled kernel) against the naive oracle: values and gradients for every
relation shape x reduction x weights x mask, bfloat16, odd shapes, 1 and 2 threads, gradcheck,
and the build cache (key, fallback, a compile failure)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from cmpnn_dist.graph import Graph, graph_from_triples
from cmpnn_dist.ops import available_impls, propagate, resolve_impl

pytestmark = pytest.mark.skipif(
    "cpu" not in available_impls(), reason="compiled CPU kernel unavailable (no compiler)"
)
AGGS = ("sum", "sumsq", "max", "min")


def _graph(num_nodes=12, num_rel=3, seed=0):
    """Random facts, a hub (node 0 receives from nodes 1-9), isolated nodes 10 and 11."""
    rng = np.random.default_rng(seed)
    cols = [rng.integers(lo, hi, 20) for lo, hi in ((1, 9), (0, num_rel), (1, 9))]
    facts = list(zip(*cols, strict=True))
    facts += [(h, h % num_rel, 0) for h in range(1, 10)]
    facts = sorted({tuple(map(int, f)) for f in facts})
    return graph_from_triples(num_nodes, num_rel, np.array(facts))


def _inputs(graph, batch, dim, per_query, weights, masked, dtype=torch.float64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(graph.num_nodes, batch, dim, generator=gen, dtype=dtype)
    shape = (batch, graph.num_relations, dim) if per_query else (graph.num_relations, dim)
    rel = torch.randn(*shape, generator=gen, dtype=dtype)
    ew = None
    if weights is not None:
        wshape = (graph.num_edges,) if weights == "shared" else (batch, graph.num_edges)
        ew = torch.rand(*wshape, generator=gen, dtype=dtype) + 0.5
    mask = None
    if masked:
        mask = torch.rand(graph.num_edges, generator=gen) > 0.3
    return x, rel, ew, mask


@contextmanager
def _torch_threads(threads: int):
    """torch's intra-op thread count set to ``threads`` inside the block, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run(impl, graph, x, rel, ew, mask, aggs, grad_out):
    leaves = [t.detach().requires_grad_() for t in (x, rel) + ((ew,) if ew is not None else ())]
    out = propagate(graph, leaves[0], leaves[1], message="mul", aggregators=aggs,
                    edge_mask=mask, edge_weight=leaves[2] if ew is not None else None,
                    impl=impl)  # fmt: skip
    loss = sum((out[a] * grad_out[a]).sum() for a in aggs)
    loss.backward()
    return out, [t.grad for t in leaves]


@pytest.mark.parametrize("per_query", [False, True])
@pytest.mark.parametrize("weights", [None, "shared", "per_query"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("aggs", [("sum",), ("sumsq",), ("max",), ("min",), AGGS])
def test_cpu_matches_naive(per_query, weights, masked, aggs):
    graph = _graph()
    x, rel, ew, mask = _inputs(graph, 3, 5, per_query, weights, masked)
    gen = torch.Generator().manual_seed(7)
    g = {a: torch.randn(x.shape, generator=gen, dtype=x.dtype) for a in aggs}
    want, want_grads = _run("naive", graph, x, rel, ew, mask, aggs, g)
    got, got_grads = _run("cpu", graph, x, rel, ew, mask, aggs, g)
    for a in (*aggs, "degree"):
        torch.testing.assert_close(got[a], want[a], msg=a)
    for name, gg, wg in zip(("x", "relation", "edge_weight"), got_grads, want_grads, strict=False):
        torch.testing.assert_close(gg, wg, msg=f"grad {name}")


def _dense_graph(num_nodes=20, num_rel=3, facts=700, seed=0):
    """Mean in-degree 70 (with inverses): the kernel's max / min backward uses win lists."""
    rng = np.random.default_rng(seed)
    every = np.stack(np.meshgrid(*map(np.arange, (num_nodes, num_rel, num_nodes))), -1)
    every = every.reshape(-1, 3)
    return graph_from_triples(num_nodes, num_rel, every[rng.permutation(len(every))[:facts]])


@pytest.mark.parametrize(
    "kind, batch, dim, masked, threads, dtype",
    [
        ("sparse", 2, 3, False, 1, torch.float32),  # mean in-degree < 32: the dense blend
        ("sparse", 1024, 64, False, 1, torch.float32),  # B d = 65,536: the blend of wide rows
        ("dense", 3, 5, False, 1, torch.float32),  # mean in-degree 70: win lists
        ("dense", 3, 5, True, 2, torch.float32),
        ("dense", 3, 5, True, 1, torch.float64),  # float64 entries
    ],
)
def test_cpu_max_min_backward_every_path(kind, batch, dim, masked, threads, dtype):
    """max / min (and PNA's sum / sumsq beside them) against the oracle through each backward
    path; in the sparse graph node 4 has one in-edge, which attains its max and its min."""
    if kind == "sparse":
        facts = np.array([(0, 0, 1), (2, 1, 1), (3, 0, 1), (1, 1, 2), (3, 1, 2), (2, 0, 4)])
        graph = graph_from_triples(5, 2, facts)
    else:
        graph = _dense_graph()
    x, rel, _, mask = _inputs(graph, batch, dim, True, None, masked, dtype=dtype)
    gen = torch.Generator().manual_seed(3)
    g = {a: torch.randn(x.shape, generator=gen, dtype=dtype) for a in AGGS}
    want, want_grads = _run("naive", graph, x, rel, None, mask, AGGS, g)
    with _torch_threads(threads):
        got, got_grads = _run("cpu", graph, x, rel, None, mask, AGGS, g)
    for a in AGGS:
        torch.testing.assert_close(got[a], want[a])
    for gg, wg in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(gg, wg, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_threads_hub_and_isolated_nodes(threads):
    """A node with 10^5 in-edges, nodes without any, 1 and 2 threads: same as the oracle."""
    n, hub_in = 2000, 100_000
    rng = np.random.default_rng(3)
    heads = np.concatenate([rng.integers(1, n, hub_in), rng.integers(1, n, 20_000)])
    tails = np.concatenate([np.zeros(hub_in, np.int64), rng.integers(1, n - 100, 20_000)])
    rels = rng.integers(0, 4, len(heads))
    graph = graph_from_triples(n, 4, np.stack([heads, rels, tails], 1), add_inverse=False)
    assert int(graph.in_degree()[0]) > 90_000 and int((graph.in_degree() == 0).sum()) >= 90
    from cmpnn_dist.ops.cpu import short_positions

    # the hub's in-edge positions need int32; every other test graph records int16 ones
    assert not short_positions(graph) and short_positions(_graph())
    x, rel, ew, mask = _inputs(graph, 2, 8, False, "shared", True, dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    g = {a: torch.randn(x.shape, generator=gen) for a in AGGS}
    with _torch_threads(threads):
        got, got_grads = _run("cpu", graph, x, rel, ew, mask, AGGS, g)
    want, want_grads = _run("naive", graph.to("cpu"), x.double(), rel.double(), ew.double(),
                            mask, AGGS, {a: t.double() for a, t in g.items()})  # fmt: skip
    for a in (*AGGS, "degree"):
        torch.testing.assert_close(got[a].double(), want[a], rtol=1e-4, atol=1e-3, msg=a)
    for gg, wg in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(gg.double(), wg, rtol=1e-4, atol=1e-3)


def test_cpu_is_deterministic_with_two_threads():
    """Same inputs, same thread count: bit-identical outputs and gradients (exact resume)."""
    graph = _graph()
    x, rel, ew, mask = _inputs(graph, 4, 16, True, "shared", True, dtype=torch.float32)
    g = {a: torch.ones_like(x) for a in AGGS}
    with _torch_threads(2):
        runs = [_run("cpu", graph, x, rel, ew, mask, AGGS, g) for _ in range(5)]
    for out, grads in runs[1:]:
        assert all(torch.equal(out[a], runs[0][0][a]) for a in AGGS)
        assert all(torch.equal(a, b) for a, b in zip(grads, runs[0][1], strict=True))


def test_cpu_one_node_and_no_edges():
    one = Graph(1, 2, torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]))
    x = torch.randn(1, 2, 3, dtype=torch.float64)
    rel = torch.randn(2, 3, dtype=torch.float64)
    out = propagate(one, x, rel, message="mul", aggregators=AGGS, impl="cpu")
    for a in AGGS:
        want = x * rel[1] if a != "sumsq" else (x * rel[1]) ** 2
        torch.testing.assert_close(out[a], want)
    empty = Graph(3, 2, torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                  torch.zeros(0, dtype=torch.int64))  # fmt: skip
    x = torch.randn(3, 2, 3, requires_grad=True)
    out = propagate(empty, x, rel.float(), message="mul", aggregators=AGGS, impl="cpu")
    assert all(float(out[a].detach().abs().sum()) == 0 for a in AGGS)
    assert float(out["degree"].sum()) == 0
    sum(out[a].sum() for a in AGGS).backward()
    assert float(x.grad.abs().sum()) == 0


def test_cpu_bfloat16_accumulates_in_float32():
    """bf16 in, bf16 out, computed in float32: a hub's sum of 2,000 bf16 messages is the exact
    sum (of the bf16 inputs) rounded once, within bf16's rounding (2^-8 relative)."""
    n = 2001
    facts = np.stack([np.arange(1, n), np.zeros(n - 1, np.int64), np.zeros(n - 1, np.int64)], 1)
    graph = graph_from_triples(n, 1, facts, add_inverse=False)
    x, rel, _, _ = _inputs(graph, 2, 4, False, None, False, dtype=torch.float32)
    xb = (x.abs() + 1).bfloat16().requires_grad_()  # positive messages: 16-bit sums drift
    rb = rel.bfloat16().requires_grad_()
    truth = propagate(graph, xb.double(), rb.double(), message="mul", aggregators=("sum",),
                      impl="naive")["sum"]  # fmt: skip
    got = propagate(graph, xb, rb, message="mul", aggregators=AGGS, impl="cpu")
    assert got["sum"].dtype == torch.bfloat16
    err = (got["sum"].detach().double() - truth.detach()).abs()
    assert bool((err <= 2**-8 * truth.abs()).all())
    sum(got[a].float().sum() for a in AGGS).backward()
    assert xb.grad.dtype == torch.bfloat16 and rb.grad.dtype == torch.bfloat16
    ref = propagate(graph, xb.float(), rb.float(), message="mul", aggregators=AGGS,
                    impl="reference")  # fmt: skip
    for a in AGGS:
        torch.testing.assert_close(got[a].float(), ref[a], rtol=2e-2, atol=1e-2 * float(
            ref[a].detach().abs().max()))  # fmt: skip


def test_cpu_gradcheck():
    graph = _graph(seed=2)
    x, rel, ew, mask = _inputs(graph, 2, 3, True, "per_query", True)

    def fn(x, rel, ew):
        out = propagate(graph, x, rel, message="mul", aggregators=AGGS, edge_mask=mask,
                        edge_weight=ew, impl="cpu")  # fmt: skip
        return tuple(out[a] for a in AGGS)

    inputs = tuple(t.requires_grad_() for t in (x, rel, ew))
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6)


def test_auto_picks_cpu_for_mul_on_cpu():
    x = torch.zeros(1)
    assert resolve_impl("auto", x, message="mul") == "cpu"
    assert resolve_impl("auto", x, message="mul", weighted=True) == "cpu"
    assert resolve_impl("auto", x, message="basis") == "reference"
    assert resolve_impl("auto", x, message="transe") == "generic"
    with pytest.raises(ValueError, match="covers messages mul"):
        resolve_impl("cpu", x, message="basis")


def _python(code, env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)  # fmt: skip


@pytest.mark.integration
def test_build_cache_fallback_and_failure(tmp_path: Path):
    """A fresh cache builds once and is reused; a compile failure and the off switch each print
    one line and leave auto on the pure-torch path; the key changes with the flags."""
    probe = ("from cmpnn_dist.ops import resolve_impl; import torch;"
             "print(resolve_impl('auto', torch.zeros(1)))")  # fmt: skip
    env = {"CMPNN_DIST_CACHE": str(tmp_path / "cache")}
    first = _python(probe, env)
    assert first.stdout.strip() == "cpu", first.stderr
    assert "compiled kernel (compiled in" in first.stderr
    libs = list((tmp_path / "cache" / "cpu_kernel").glob("*/cmpnn_cpu.so"))
    assert len(libs) == 1 and not list(libs[0].parent.glob("*.tmp*"))
    second = _python(probe, env)
    assert second.stdout.strip() == "cpu" and f"cached at {libs[0]}" in second.stderr
    off = _python(probe, {**env, "CMPNN_DIST_CPU_KERNEL": "0"})
    assert off.stdout.strip() == "reference"
    assert off.stderr.count("pure-torch path") == 1
    bad = tmp_path / "bad-cxx"
    bad.write_text("#!/bin/sh\necho 'c++ 1'\necho 'fake.cpp:1: error: broken' >&2; exit 1\n")
    bad.chmod(0o755)
    failed = _python(probe, {**env, "CXX": str(bad)})
    assert failed.stdout.strip() == "reference", failed.stderr
    lines = [ln for ln in failed.stderr.splitlines() if "CPU message passing" in ln]
    assert len(lines) == 1 and "compile failed: fake.cpp:1: error: broken" in lines[0]
    assert not list((tmp_path / "cache" / "cpu_kernel").glob("*/*.tmp*"))
    assert len(list((tmp_path / "cache" / "cpu_kernel").glob("*/cmpnn_cpu.so"))) == 1


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_kernel_loads_when_the_first_call_has_no_grad(mode):
    """An evaluation's first forward runs under no_grad / inference_mode: the load's self-test
    (a backward) must still pass there, else every evaluate / predict process would silently
    run the pure-torch path."""
    probe = (f"import torch\nwith torch.{mode}():\n"
             "    from cmpnn_dist.ops import resolve_impl\n"
             "    print(resolve_impl('auto', torch.zeros(1)))")  # fmt: skip
    out = _python(probe, {})
    assert out.stdout.strip() == "cpu", out.stderr
    assert "compiled kernel" in out.stderr
