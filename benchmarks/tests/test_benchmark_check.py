"""The output check the message-passing benchmark runs on every implementation it times
(benchmarks/ops/output_check.py): it must pass correct implementations and catch wrong ones,
including a gradient that a plain ``sum()`` loss cannot tell from the right one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.ops import output_check
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import get_impl

AGGS = ("sum", "max")
NAMES = ["sum", "max", "d/x", "d/relation"]
SUM_NAMES = ["sum", "d/x", "d/relation"]


def small_graph():
    rng = np.random.default_rng(3)
    n, r, m = 40, 3, 200
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, r, m), rng.integers(0, n, m)], 1)
    return graph_from_triples(n, r, facts)


def inputs(graph, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(graph.num_nodes, 3, 4, generator=gen).to(dtype).requires_grad_()
    rel = torch.randn(graph.num_relations, 4, generator=gen).to(dtype).requires_grad_()
    return x, rel, [x, rel]


def test_correct_implementation_passes() -> None:
    g = small_graph()
    x, rel, leaves = inputs(g)
    want = output_check.oracle(g, x, "mul", rel, leaves, AGGS)
    got = output_check.outputs_and_grads(get_impl("naive"), g, x, "mul", rel, leaves, AGGS)
    check = output_check.compare(got, want, NAMES, len(AGGS), torch.float32, ties=True)
    assert check["ok"], check
    assert check["out_err"] < 1e-6 and check["grad_err"] < 1e-5
    assert len(want) == len(AGGS) + 2 and all(t.dtype == torch.float32 for t in want)


def test_bfloat16_inputs_are_checked_against_their_float32_upcast() -> None:
    g = small_graph()
    x, rel, leaves = inputs(g, torch.bfloat16)
    want = output_check.oracle(g, x, "mul", rel, leaves, ("sum",))
    ref = get_impl("reference")(g, x.detach().float(), rel.detach().float(), message="mul",
                                aggregators=("sum",))["sum"]  # fmt: skip
    torch.testing.assert_close(want[0], ref)

    def float32_accumulation(graph, x, relation, **kw):  # bfloat16 in and out, like `fused`
        out = get_impl("naive")(graph, x.float(), relation.float(), **kw)
        return {a: t.to(x.dtype) for a, t in out.items()}

    got = output_check.outputs_and_grads(float32_accumulation, g, x, "mul", rel, leaves, ("sum",))
    assert got[0].dtype == torch.float32 and x.dtype == torch.bfloat16
    check = output_check.compare(got, want, SUM_NAMES, 1, torch.bfloat16)
    assert check["ok"], check
    assert check["out_err"] > 0  # bfloat16 results rounded: the tolerance is what passes them
    # the naive impl accumulates in bfloat16 itself: its relation gradient is caught
    got = output_check.outputs_and_grads(get_impl("naive"), g, x, "mul", rel, leaves, ("sum",))
    check = output_check.compare(got, want, SUM_NAMES, 1, torch.bfloat16)
    assert not check["ok"] and check["tensors"]["d/relation"]["frac_over_tol"] > 0


def test_a_dropped_edge_fails() -> None:
    g = small_graph()
    x, rel, leaves = inputs(g)
    want = output_check.oracle(g, x, "mul", rel, leaves, AGGS)
    keep = torch.ones(g.num_edges, dtype=torch.bool)
    keep[int(g.indptr[int(g.in_degree().argmax())])] = False  # one in-edge of the busiest node

    def dropping(graph, x, relation, *, message, aggregators):
        return get_impl("naive")(graph, x, relation, message=message, aggregators=aggregators,
                                 edge_mask=keep)  # fmt: skip

    got = output_check.outputs_and_grads(dropping, g, x, "mul", rel, leaves, AGGS)
    check = output_check.compare(got, want, NAMES, len(AGGS), torch.float32, ties=True)
    assert not check["ok"] and check["out_err"] > 1e-3
    assert output_check.describe(check).startswith("FAILED")


def test_misrouted_gradient_fails_although_a_plain_sum_hides_it() -> None:
    """Right outputs, input gradient computed as if query b were query b - 1: with one shared
    relation vector a plain ``sum()`` loss gives identical gradients, the weighted loss not."""
    g = small_graph()
    x, rel, leaves = inputs(g)
    naive = get_impl("naive")

    def misrouted(graph, x, relation, *, message, aggregators):
        right = naive(graph, x, relation, message=message, aggregators=aggregators)
        rolled = naive(graph, x.roll(1, dims=1), relation, message=message,
                       aggregators=aggregators)  # fmt: skip
        return {a: right[a].detach() + rolled[a] - rolled[a].detach() for a in ("sum",)}

    def plain_grads(fn):
        out = fn(g, x, rel, message="mul", aggregators=("sum",))["sum"]
        return torch.autograd.grad(out.sum(), leaves)

    for a, b in zip(plain_grads(misrouted), plain_grads(naive), strict=True):
        torch.testing.assert_close(a, b)  # the timing loop's loss cannot see the bug
    want = output_check.oracle(g, x, "mul", rel, leaves, ("sum",))
    got = output_check.outputs_and_grads(misrouted, g, x, "mul", rel, leaves, ("sum",))
    check = output_check.compare(got, want, SUM_NAMES, 1, torch.float32)
    assert check["out_err"] < 1e-6  # forward right
    assert not check["ok"] and check["grad_frac_over_tol"] > 0.1


def test_isolated_tie_routings_pass_only_with_max_or_min() -> None:
    want = [torch.ones(10), torch.zeros(100_000)]
    want[1][0] = 1.0
    few = [want[0].clone(), want[1].clone()]
    few[1][:5] = 0.5  # 5 / 100,000 gradient elements off: an exact tie routed elsewhere
    check = output_check.compare(few, want, ["max", "d/x"], 1, torch.float32, ties=True)
    assert check["ok"] and check["grad_frac_over_tol"] == pytest.approx(5e-5)
    assert check["tensors"]["d/x"]["max_err"] == pytest.approx(0.5)
    # without max / min there are no ties to excuse: the same error fails
    assert not output_check.compare(few, want, ["sum", "d/x"], 1, torch.float32)["ok"]
    many = [want[0].clone(), want[1].clone()]
    many[1][:50] = 0.5
    assert not output_check.compare(many, want, ["max", "d/x"], 1, torch.float32, ties=True)["ok"]
    with pytest.raises(ValueError, match="d/x: shape"):
        output_check.compare([torch.ones(3)], [torch.ones(4)], ["d/x"], 0, torch.float32)


@pytest.mark.integration
@pytest.mark.triton
def test_benchmark_script_checks_every_impl_on_a_small_graph(tmp_path: Path) -> None:
    """benchmarks/ops/message_passing.py --small end to end on CPU: every implementation runs (the
    fused kernels interpreted, where Triton is installed) and passes the output check the GPU
    run relies on.  Without Triton the fused rows must say why they were skipped."""
    import importlib.util
    import json

    from benchmarks.ops import message_passing

    argv = ["--small", "--device", "cpu", "--batch", "2", "--dim", "4", "--reps", "1",
            "--cases", "msg1_pna_fp32", "msg1_sum_bf16", "--impls", "reference", "fused",
            "naive", "--out", str(tmp_path)]  # fmt: skip
    assert message_passing.main(argv) == 0
    result = json.loads((tmp_path / "message_passing_cpu_small.json").read_text())
    rows = {(case, r["impl"]): r for case, rs in result["cases"].items() for r in rs}
    fused_cases = ("msg1_pna_fp32", "msg1_sum_bf16")
    if importlib.util.find_spec("triton") is None:
        assert result["triton"] == "not installed"
        for case in fused_cases:
            skipped = rows.pop((case, "fused"))
            assert skipped == {"impl": "fused", "error": "skipped: Triton is not installed"}
        fused_cases = ()
    assert set(rows) == {
        ("msg1_pna_fp32", "naive"), ("msg1_pna_fp32", "reference"), ("msg1_sum_bf16", "reference"),
        *((case, "fused") for case in fused_cases),
    }  # fmt: skip
    assert rows[("msg1_pna_fp32", "reference")]["check"] == {"skipped": "oracle"}
    for key, row in rows.items():
        if key != ("msg1_pna_fp32", "reference"):
            assert row["check"]["ok"], (key, row["check"])
            assert set(row["check"]["tensors"]) >= {"d/x", "d/relation"}
    assert "| check |" in (tmp_path / "message_passing_cpu_small.md").read_text()
