"""One message-passing layer on the biokg-scale synthetic graph, every implementation side by side.

Graph: ``synthetic:biokg_scale`` (93,773 nodes, 4,762,677 facts -> 9,525,354 edges with
inverses, 102 relation ids; skewed degrees), B = 8 queries, d = 32.  For each case
(message kind x aggregators x dtype) and implementation: forward ms and forward+backward ms
(input and relation gradients; medians over ``--reps``), and the peak memory of the
forward+backward above what was allocated before (CUDA: ``max_memory_allocated``; CPU: peak
resident set sampled every 2 ms).  ``sparse_floor`` is ``torch.sparse.mm`` with the same CSR
and no relation product: a lower bound for any gather-sum.

    python -m benchmarks.ops.message_passing --device cuda      # or --device cpu

Writes ``benchmarks/results/message_passing_<device>.json`` and ``.md`` (card, versions,
command).  On CPU the fused Triton kernels are skipped (they run only under the slow
interpreter there) and ``naive`` (about 50 GB) is skipped when it cannot fit.  ``--small``
(with e.g. ``--batch 2 --dim 4``) runs every implementation on a 60-node graph, the fused
kernels interpreted on CPU: a check of the script and of its output check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from functools import cache, partial
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.graphs import load_graph, small_graph
from benchmarks.harness.provenance import command_line
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import RssPeak, timed
from benchmarks.ops import output_check
from cmpnn_dist.graph import Graph

HERE = Path(__file__).resolve().parent

CASES = [  # name, message kind, aggregators, dtype, implementations
    ("msg1_sum_fp32", "mul1", ("sum",), "float32",
     ["naive", "reference", "scatter", "fused", "sparse_floor"]),
    ("msg1_sum_bf16", "mul1", ("sum",), "bfloat16", ["reference", "fused", "sparse_floor"]),
    ("msg1_pna_fp32", "mul1", ("sum", "sumsq", "max", "min"), "float32",
     ["naive", "reference", "scatter", "fused"]),
    ("msg2_sum_fp32", "mul2", ("sum",), "float32", ["reference", "scatter", "fused"]),
    ("basis_sum_fp32", "basis", ("sum",), "float32", ["reference", "scatter", "fused"]),
]  # fmt: skip


def make_inputs(kind: str, graph: Graph, b: int, d: int, dtype: torch.dtype, dev: str):
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(graph.num_nodes, b, d, generator=gen).to(dev, dtype).requires_grad_()
    r2 = graph.num_relations
    if kind == "mul1":
        rel = torch.randn(b, r2, d, generator=gen).to(dev, dtype).requires_grad_()
        return x, "mul", rel, [x, rel]
    if kind == "mul2":
        rel = torch.randn(r2, d, generator=gen).to(dev, dtype).requires_grad_()
        return x, "mul", rel, [x, rel]
    bases = (torch.randn(4, d, d, generator=gen) / d**0.5).to(dev, dtype).requires_grad_()
    coef = torch.randn(r2, 4, generator=gen).to(dev, dtype).requires_grad_()
    return x, "basis", (bases, coef), [x, bases, coef]


def leaf_names(kind: str) -> list[str]:
    """Names of make_inputs' leaves, in order."""
    return ["x", "bases", "coef"] if kind == "basis" else ["x", "relation"]


def case_oracle(case: tuple, graph: Graph, args: argparse.Namespace) -> list[torch.Tensor]:
    """The case's outputs and gradients from the float32 reference (benchmarks/output_check)."""
    kind, aggs = case[1], case[2]
    dtype = getattr(torch, case[3])
    x, message, rel, leaves = make_inputs(kind, graph, args.batch, args.dim, dtype, args.device)
    return output_check.oracle(graph, x, message, rel, leaves, aggs)


def sparse_layer(graph: Graph, dev: str):
    """y = A x with A [N, N] CSR (A[v, u] = number of edges u -> v), no relation product."""
    vals = torch.ones(graph.num_edges, device=dev)
    a = torch.sparse_csr_tensor(graph.indptr.to(dev), graph.src.to(dev), vals,
                                (graph.num_nodes, graph.num_nodes))  # fmt: skip

    mats = {torch.float32: a}

    def run(x: torch.Tensor, dtype: torch.dtype) -> dict:
        if dtype not in mats:
            mats[dtype] = a.to(dtype)
        mat = mats[dtype]
        return {"sum": torch.sparse.mm(mat, x.reshape(x.shape[0], -1)).view_as(x)}

    return run


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 20) -> float:
    """TB/s of a device-to-device copy, bytes read plus written (median of ``reps``)."""
    a = torch.empty(nbytes // 4, device="cuda").normal_()
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times) / 1e12


def measure(impl: str, case: tuple, graph: Graph, args: argparse.Namespace, floor, want) -> dict:
    """Times, peak memory and (``want() -> the case's oracle tensors``) the output check."""
    from cmpnn_dist.ops import get_impl

    name, kind, aggs, dtype_name, _ = case
    dtype = getattr(torch, dtype_name)
    dev = args.device
    x, message, rel, leaves = make_inputs(kind, graph, args.batch, args.dim, dtype, dev)
    if impl == "sparse_floor":
        leaves = [x]

        def fwd() -> dict:
            return floor(x, dtype)
    else:
        prop = get_impl(impl, x)

        def fwd() -> dict:
            return prop(graph, x, rel, message=message, aggregators=aggs)

    def fwd_bwd() -> None:
        out = fwd()
        loss = sum(out[a].float().sum() for a in aggs)
        torch.autograd.grad(loss, leaves)

    warm = 2 if dev == "cuda" else 1
    res = {"impl": impl}
    fwd_bwd()  # compiles / autotunes / builds cached graph structures outside the timings
    res["forward_ms"] = timed(fwd, dev, args.reps, warm)
    if kind.startswith("mul"):  # source-row gathers alone: |E| x B x d elements
        gathered = graph.num_edges * x[0].numel() * x.element_size()
        res["gather_tb_per_s"] = gathered / (res["forward_ms"] * 1e-3) / 1e12
    res["fwd_bwd_ms"] = timed(fwd_bwd, dev, args.reps, warm)
    if dev == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd()
        torch.cuda.synchronize()
        res["peak_gb"] = (torch.cuda.max_memory_allocated() - base) / 1e9
        res["peak_total_gb"] = torch.cuda.max_memory_allocated() / 1e9
    else:
        with RssPeak() as p:
            fwd_bwd()
        res["peak_gb"] = (p.peak - p.base) / 1e9
        res["peak_total_gb"] = p.peak / 1e9
    if impl == "sparse_floor":
        res["check"] = {"skipped": "n/a (no relation product)"}
    elif impl == "reference" and dtype == torch.float32:
        res["check"] = {"skipped": "oracle"}
    elif want is not None:
        got = output_check.outputs_and_grads(prop, graph, x, message, rel, leaves, aggs)
        names = [*aggs, *(f"d/{n}" for n in leaf_names(kind))]
        ties = bool({"max", "min"} & set(aggs))
        res["check"] = output_check.compare(got, want(), names, len(aggs), dtype, ties)
    return res


def _gather_note(row: dict) -> str:
    """'gathers 3.1 TB/s' (source-row bytes over forward time) for rows that have it."""
    bw = row.get("gather_tb_per_s")
    if bw is None:
        return ""
    return f"gathers {bw:.2f} TB/s" if bw >= 0.1 else f"gathers {bw * 1e3:.1f} GB/s"


def to_markdown(r: dict) -> str:
    lines = [
        f"# Message passing, one layer: {r['graph']}",
        "",
        f"- device: {r['device']}; torch {r['torch']}, triton {r['triton']}, python {r['python']}",
        f"- B = {r['batch']}, d = {r['dim']}; medians of {r['reps']} runs",
        f"- command: `{r['command']}`",
        "- peak = extra memory during one forward+backward (CUDA allocator peak, or CPU RSS peak)",
        "- check = outputs and gradients vs the float32 reference on the same inputs, errors "
        "relative to the largest oracle value (benchmarks/ops/output_check.py)",
        "",
        "| case | impl | forward ms | fwd+bwd ms | peak GB | fwd vs reference | note | check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, rows in r["cases"].items():
        ref = next((x for x in rows if x["impl"] == "reference" and "forward_ms" in x), None)
        for x in rows:
            if "forward_ms" not in x:
                lines.append(f"| {case} | {x['impl']} | - | - | - | - | {x.get('error', '')} | - |")
                continue
            ratio = f"{ref['forward_ms'] / x['forward_ms']:.1f}x" if ref else "-"
            note = _gather_note(x)
            lines.append(
                f"| {case} | {x['impl']} | {x['forward_ms']:.2f} | {x['fwd_bwd_ms']:.2f} | "
                f"{x['peak_gb']:.2f} | {ratio} | {note} | {output_check.describe(x.get('check'))} |"
            )
    if r.get("copy_tb_per_s"):
        lines += ["", f"Device-to-device copy (read + write): {r['copy_tb_per_s']:.2f} TB/s."]
    if r.get("tuning_log"):
        head = "## Autotuning (fused; config = BLOCK_E,BLOCK_C,warps,stages,hints,prefetch)"
        lines += ["", head, "", "| kernel | dtype, flags | best | best ms | slowest ms |"]
        lines.append("|---|---|---|---|---|")
        for t in r["tuning_log"]:
            ms = t["timings_ms"]
            best = f"{ms[t['best']]:.3f}" if t["best"] in ms else "-"
            worst = f"{max(ms.values()):.3f}" if ms else "-"
            key = f"{t.get('dtype', '')} {' '.join(t.get('flags', []))}"
            lines.append(f"| {t['kernel']} | {key} | {t['best']} | {best} | {worst} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=None, help="timed runs (default 20 CUDA, 3 CPU)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--cases", nargs="*", default=None, help="subset of case names")
    ap.add_argument("--impls", nargs="*", default=None, help="subset of implementations")
    ap.add_argument("--graph-cache", default="/tmp/cmpnn_biokg_scale_csr.npz")
    ap.add_argument("--no-check", action="store_true", help="skip the output check")
    ap.add_argument(
        "--small",
        action="store_true",
        help="60-node graph: checks the script (fused runs interpreted on CPU)",
    )
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    args.reps = args.reps or (20 if args.device == "cuda" else 3)
    t0 = time.time()
    graph = (small_graph() if args.small else load_graph(Path(args.graph_cache))).to(args.device)
    print(f"graph: {graph.num_nodes} nodes, {graph.num_edges} edges ({time.time() - t0:.1f}s)")
    if args.device == "cuda":
        card = torch.cuda.get_device_name()
        tag = "cuda_" + card.replace("NVIDIA ", "").split()[0].lower()
    else:
        card = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"
        tag = "cpu"
    if args.small:
        tag += "_small"
    try:
        import triton
    except ImportError:  # the CPU install has no Triton: the fused rows say so and are skipped
        triton = None

    results = {
        "graph": ("random with a hub" if args.small else "synthetic:biokg_scale")
        + f" ({graph.num_nodes} nodes, {graph.num_edges} edges, "
        f"{graph.num_relations} relation ids, max in-degree {int(graph.in_degree().max())})",
        "device": card,
        "device_tag": tag,
        "torch": torch.__version__,
        "triton": triton.__version__ if triton is not None else "not installed",
        "python": platform.python_version(),
        "batch": args.batch,
        "dim": args.dim,
        "reps": args.reps,
        "command": command_line(__file__, argv or sys.argv[1:]),
        "cases": {},
    }
    floor = sparse_layer(graph, args.device)
    if args.device == "cuda":
        from cmpnn_dist.ops import triton_tuning

        results["tuning_log"] = triton_tuning.TUNING_LOG  # grows as the fused kernels tune
        results["copy_tb_per_s"] = copy_bandwidth()
        print(f"device-to-device copy: {results['copy_tb_per_s']:.2f} TB/s (read + write)")
    for case in CASES:
        if args.cases and case[0] not in args.cases:
            continue
        rows = results["cases"].setdefault(case[0], [])
        # the oracle is computed once per case, when the first implementation needs it
        want = None if args.no_check else cache(partial(case_oracle, case, graph, args))
        for impl in case[4]:
            if args.impls and impl not in args.impls:
                continue
            if impl == "fused" and triton is None:
                rows.append({"impl": impl, "error": "skipped: Triton is not installed"})
                continue
            if args.device == "cpu" and impl == "fused" and not args.small:
                rows.append({"impl": impl, "error": "skipped: Triton runs only interpreted on CPU"})
                continue
            if args.device == "cpu" and impl == "naive" and not args.small:
                rows.append({"impl": impl, "error": "skipped: needs ~50 GB (E x B x d messages)"})
                continue
            try:
                row = measure(impl, case, graph, args, floor, want)
            except Exception as exc:  # noqa: BLE001 - record (OOM, unsupported dtype) and go on
                row = {"impl": impl, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            if args.device == "cuda":
                torch.cuda.empty_cache()
            rows.append(row)
            print(case[0], json.dumps(row), flush=True)
        stem = f"message_passing_{results['device_tag']}"
        save_results(Path(args.out), stem, results, to_markdown(results))
    print(to_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
