"""One message-passing layer on the CPU: the compiled kernel (``impl=cpu``) against today's
reference path and against the memory floor, all measured in the same run.

Graph: ``synthetic:biokg_scale`` (93,773 nodes, 9,525,354 edges with inverses, 102 relation
ids; cached as in ``benchmarks/ops/message_passing.py``) and a tenth of it (every 10th edge:
952,535 edges, same nodes).  B = 8 queries, d = 32 (a 1 KiB float32 row per node).
Cases: ``mul`` with a relation table shared by the batch (MSG 2) and per query (MSG 1),
``sum`` and PNA (sum, sumsq, max, min), float32 and bfloat16.

For each scale and thread count (``torch.set_num_threads``, the same for every side):

* the floor, measured here: ``copy`` GB/s (bytes copied once per second, a 256 MiB copy)
  and ``gather`` GB/s (random 1 KiB rows of x by ``index_select`` in 4,096-row pieces into a
  reused buffer, i.e. bytes of rows read per second); ``floor fwd`` = E rows gathered + the
  outputs' N rows written; ``floor bwd`` = the gradient rows each edge must read, gathered
  (one per edge for a sum over a source-sorted graph; two for PNA, g_sum and g_sumsq, whose
  term 2 m_e g_sumsq[v] is a per-edge product) + max / min's N gradient and argument rows +
  x read and its gradient written; ``bwd/1 row`` keeps sum's one-row floor for every case;
* forward and forward+backward CPU seconds (``time.process_time``: stable on a loaded
  machine; wall time is recorded too) of ``cpu`` and ``reference``, medians of ``--rounds``
  interleaved rounds; the backward takes a random upstream gradient for every output and
  computes the gradients of x and of the relation table.

    python -m benchmarks.ops.cpu_kernel [--scales tenth,full] [--threads 1,2] [--rounds 3]
        [--cases msg2_sum_fp32,...] [--impls cpu,reference] [--suffix NAME]

Writes ``benchmarks/results/cpu_kernel[_SUFFIX].json`` and ``.md`` (commit, machine, load
before and after, ``THP_MEM_ALLOC_ENABLE``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()  # OMP_WAIT_POLICY=PASSIVE before torch loads libgomp, as training does

import torch  # noqa: E402

from benchmarks.harness.args import make_parser  # noqa: E402
from benchmarks.harness.graphs import load_graph  # noqa: E402
from benchmarks.harness.provenance import command_line, git_commit  # noqa: E402
from benchmarks.harness.results import results_dir, write_atomic  # noqa: E402
from cmpnn_dist.graph import Graph  # noqa: E402
from cmpnn_dist.ops import available_impls, cpu_build, propagate  # noqa: E402

HERE = Path(__file__).resolve().parent

PNA = ("sum", "sumsq", "max", "min")
CASES = {  # name: (per-query relation table, aggregators, dtype)
    "msg2_sum_fp32": (False, ("sum",), torch.float32),
    "msg2_pna_fp32": (False, PNA, torch.float32),
    "msg1_sum_fp32": (True, ("sum",), torch.float32),
    "msg2_sum_bf16": (False, ("sum",), torch.bfloat16),
}


def tenth(graph: Graph) -> Graph:
    """Every 10th edge of ``graph`` (same nodes, CSR order kept)."""
    keep = torch.arange(graph.num_edges) % 10 == 0
    dst = graph.dst()[keep]
    indptr = torch.zeros(graph.num_nodes + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(dst, minlength=graph.num_nodes), 0, out=indptr[1:])
    return Graph(graph.num_nodes, graph.num_relations, indptr, graph.src[keep], graph.rel[keep])


def uptime() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def clocks(fn) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of fn()."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def bandwidth(x: torch.Tensor, rows: int, reps: int = 3) -> dict:
    """copy and random-row gather GB/s (CPU-time based, median of ``reps``)."""
    a = torch.empty(64 << 20, dtype=torch.float32).normal_()  # 256 MiB
    b = torch.empty_like(a)
    b.copy_(a)
    copy = [a.numel() * 4 / clocks(partial(b.copy_, a))[0] / 1e9 for _ in range(reps)]
    del a, b
    flat = x.reshape(x.shape[0], -1)
    index = torch.randint(0, x.shape[0], (rows,))
    buf = torch.empty(4096, flat.shape[1], dtype=flat.dtype)

    def gather() -> None:
        for piece in index.split(4096):
            torch.index_select(flat, 0, piece, out=buf[: piece.numel()])

    gather()
    row_bytes = flat.shape[1] * flat.element_size()
    got = [rows * row_bytes / clocks(gather)[0] / 1e9 for _ in range(reps)]
    return {"copy_GBps": statistics.median(copy), "gather_GBps": statistics.median(got)}


def inputs(graph: Graph, case: str, batch: int, dim: int, seed: int = 0):
    per_query, aggs, dtype = CASES[case]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(graph.num_nodes, batch, dim, generator=gen).to(dtype)
    shape = (batch, graph.num_relations, dim) if per_query else (graph.num_relations, dim)
    rel = torch.randn(*shape, generator=gen).to(dtype)
    grads = [torch.randn(x.shape, generator=gen).to(dtype) for _ in aggs]
    return x, rel, aggs, grads


def run_case(graph: Graph, case: str, impls: list[str], args, floor: dict) -> dict:
    x, rel, aggs, grads = inputs(graph, case, args.batch, args.dim)

    def fwd(impl: str) -> None:
        propagate(graph, x, rel, message="mul", aggregators=aggs, impl=impl)

    def fwd_bwd(impl: str) -> None:
        xl, rl = x.detach().requires_grad_(), rel.detach().requires_grad_()
        out = propagate(graph, xl, rl, message="mul", aggregators=aggs, impl=impl)
        torch.autograd.backward([out[a] for a in aggs], grads)

    for impl in impls:  # warm-up: caches (blocks, transposed graph), scratch buffers
        fwd_bwd(impl)
    times: dict[str, dict[str, list]] = {i: {"fwd": [], "fwd_bwd": []} for i in impls}
    for _ in range(args.rounds):
        for impl in impls:
            times[impl]["fwd"].append(clocks(lambda i=impl: fwd(i)))
            times[impl]["fwd_bwd"].append(clocks(lambda i=impl: fwd_bwd(i)))
    row = {"case": case, "edges": graph.num_edges}
    for impl in impls:
        for kind in ("fwd", "fwd_bwd"):
            cpu = statistics.median(t[0] for t in times[impl][kind])
            wall = statistics.median(t[1] for t in times[impl][kind])
            row[f"{impl}_{kind}_cpu_s"], row[f"{impl}_{kind}_wall_s"] = cpu, wall
    if "cpu" in impls:
        got = propagate(graph, x, rel, message="mul", aggregators=aggs, impl="cpu")
        want = propagate(graph, x, rel, message="mul", aggregators=aggs, impl="reference")
        tol = 2e-2 if x.dtype == torch.bfloat16 else 1e-4
        row["check"] = all(
            torch.allclose(got[a].float(), want[a].float(), rtol=tol, atol=tol) for a in aggs
        )
    row_bytes = args.batch * args.dim * x.element_size()
    gbps = floor["gather_GBps"] * 1e9  # measured on float32 rows; bf16 rows are half as long
    copy = floor["copy_GBps"] * 1e9
    n_out = len(aggs) + 0.5 * sum(a in ("max", "min") for a in aggs)
    fwd_floor = graph.num_edges * row_bytes / gbps + graph.num_nodes * row_bytes * n_out / copy
    # backward: every edge's gradient needs its destination's g_sum and, with sumsq, g_sumsq
    # (2 m_e g_sumsq[v]: a per-edge product, nothing to fold beforehand); max / min route one
    # value per (v, b, k) to one edge: their N gradient rows and N argument rows are read
    per_edge = max(1, sum(a in ("sum", "sumsq") for a in aggs))
    extremes = sum(a in ("max", "min") for a in aggs)
    one_row = graph.num_edges * row_bytes / gbps + 2 * graph.num_nodes * row_bytes / copy
    bwd_floor = one_row + (
        (per_edge - 1) * graph.num_edges * row_bytes / gbps
        + 2 * extremes * graph.num_nodes * row_bytes / copy
    )
    row["floor_fwd_s"], row["floor_bwd_s"] = fwd_floor, bwd_floor
    row["floor_bwd_one_row_s"] = one_row
    if "cpu" in impls:
        bwd = row["cpu_fwd_bwd_cpu_s"] - row["cpu_fwd_cpu_s"]
        row["cpu_fwd_vs_floor"] = row["cpu_fwd_cpu_s"] / fwd_floor
        row["cpu_bwd_vs_floor"] = bwd / bwd_floor
        row["cpu_bwd_vs_one_row_floor"] = bwd / one_row
    if "cpu" in impls and "reference" in impls:
        for kind in ("fwd", "fwd_bwd"):
            row[f"reference_over_cpu_{kind}"] = (
                row[f"reference_{kind}_cpu_s"] / row[f"cpu_{kind}_cpu_s"]
            )
    return row


def to_markdown(result: dict) -> str:
    lines = [
        "# One message-passing layer on the CPU: compiled kernel vs reference vs floor",
        "",
        f"Commit `{result['commit']}`, {result['machine']}, torch {result['torch']}, "
        f"load (1/5/15 min) before {result['load_before']}, after {result['load_after']}; "
        f"THP_MEM_ALLOC_ENABLE={result['thp'] or 'unset'}; "
        f"OMP_WAIT_POLICY={result.get('omp_wait_policy') or 'unset (libgomp spins)'}; "
        f"kernel: {result['kernel']}.",
        f"Command: `{result['command']}`.  B={result['batch']}, d={result['dim']}; CPU seconds "
        f"(process time), medians of {result['rounds']} interleaved rounds.  Floor: "
        "E rows gathered at the measured random-gather rate + output rows at the copy rate; "
        "backward: the gradient rows every edge must read gathered (1 per edge for sum; 2 for "
        "PNA: g_sum and g_sumsq, since 2 m_e g_sumsq[v] is a per-edge product), max / min's N "
        "gradient and argument rows read, x read and its gradient written. `bwd/1 row`: the "
        "backward against one gathered row per edge (sum's floor) for every case.",
        "",
        "| scale | threads | copy GB/s | gather GB/s | case | cpu fwd | ref fwd | ref/cpu | "
        "cpu fwd+bwd | ref fwd+bwd | ref/cpu | floor fwd | floor bwd | cpu fwd/floor | "
        "cpu bwd/floor | cpu bwd/1 row | check |",
        "|" + "---|" * 17,
    ]
    for s in result["settings"]:
        for r in s["rows"]:
            lines.append(
                f"| {s['scale']} ({r['edges']:,} edges) | {s['threads']} | "
                f"{s['floor']['copy_GBps']:.1f} | {s['floor']['gather_GBps']:.1f} | {r['case']} | "
                f"{r.get('cpu_fwd_cpu_s', float('nan')):.3f} | "
                f"{r.get('reference_fwd_cpu_s', float('nan')):.3f} | "
                f"{r.get('reference_over_cpu_fwd', float('nan')):.1f}x | "
                f"{r.get('cpu_fwd_bwd_cpu_s', float('nan')):.3f} | "
                f"{r.get('reference_fwd_bwd_cpu_s', float('nan')):.3f} | "
                f"{r.get('reference_over_cpu_fwd_bwd', float('nan')):.1f}x | "
                f"{r['floor_fwd_s']:.3f} | {r['floor_bwd_s']:.3f} | "
                f"{r.get('cpu_fwd_vs_floor', float('nan')):.1f}x | "
                f"{r.get('cpu_bwd_vs_floor', float('nan')):.1f}x | "
                f"{r.get('cpu_bwd_vs_one_row_floor', float('nan')):.1f}x | {r.get('check', '-')} |"
            )
    return "\n".join(lines) + "\n"


def assemble(log: Path, threads: list[int], note: str) -> dict:
    """Settings rebuilt from the rows a run printed (``--assemble``: a run stopped before its
    end).  Rows come in order (scale, threads, case): the k-th row of a case at a scale is
    ``threads[k]``; the bandwidths are not in the rows (only the floors they gave)."""
    settings: dict[tuple, dict] = {}
    seen: dict[tuple, int] = {}
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        scale = "full" if row["edges"] > 5_000_000 else "tenth"
        k = seen.get((scale, row["case"]), 0)
        seen[(scale, row["case"])] = k + 1
        key = (scale, threads[k])
        nan = float("nan")
        settings.setdefault(key, {"scale": scale, "threads": threads[k], "rows": [],
                                  "floor": {"copy_GBps": nan, "gather_GBps": nan}})  # fmt: skip
        settings[key]["rows"].append(row)
    return {"settings": list(settings.values()), "note": note}


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--scales", default="tenth,full")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--graph-cache", default="/tmp/cmpnn_biokg_scale_csr.npz")
    ap.add_argument("--impls", default="cpu,reference", help="cpu and / or reference")
    ap.add_argument("--suffix", default="")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    ap.add_argument("--assemble", help="a log of a stopped run: write its printed rows")
    ap.add_argument("--assemble-info", nargs=3, metavar=("COMMIT", "LOAD", "NOTE"))
    args = ap.parse_args(argv)
    if args.assemble:
        commit, load, note = args.assemble_info
        threads = [int(t) for t in args.threads.split(",")]
        result = {
            **assemble(Path(args.assemble), threads, note),
            "commit": commit, "machine": f"{platform.node()} {platform.machine()}, "
            f"{os.cpu_count()} CPUs", "torch": torch.__version__, "kernel": "see note",
            "thp": os.environ.get("THP_MEM_ALLOC_ENABLE", ""), "command": note,
            "batch": args.batch, "dim": args.dim, "rounds": args.rounds,
            "load_before": load, "load_after": uptime(),
        }  # fmt: skip
        stem = "cpu_kernel" + (f"_{args.suffix}" if args.suffix else "")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(args.out) / f"{stem}.json", json.dumps(result, indent=1) + "\n")
        write_atomic(Path(args.out) / f"{stem}.md", to_markdown(result))
        print(to_markdown(result))
        return 0
    impls = [i for i in args.impls.split(",") if i != "cpu" or "cpu" in available_impls()]
    load_before, commit = uptime(), git_commit("--short", mark_dirty=True)  # the code that runs
    full = load_graph(Path(args.graph_cache))
    graphs = {"tenth": tenth(full), "full": full}
    settings = []
    for scale in args.scales.split(","):
        graph = graphs[scale]
        for threads in map(int, args.threads.split(",")):
            torch.set_num_threads(threads)
            x = torch.randn(graph.num_nodes, args.batch, args.dim)
            floor = bandwidth(x, min(graph.num_edges, 2_000_000))
            rows = []
            for case in args.cases.split(","):
                rows.append(run_case(graph, case, impls, args, floor))
                print(json.dumps(rows[-1]), flush=True)
            settings.append({"scale": scale, "threads": threads, "floor": floor, "rows": rows})
    result = {
        "commit": commit,
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "kernel": cpu_build.status(),
        "thp": os.environ.get("THP_MEM_ALLOC_ENABLE", ""),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),  # PASSIVE unless set
        "command": command_line(__file__, argv or sys.argv[1:]),
        "batch": args.batch,
        "dim": args.dim,
        "rounds": args.rounds,
        "load_before": load_before,
        "load_after": uptime(),
        "settings": settings,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "cpu_kernel" + (f"_{args.suffix}" if args.suffix else "")
    write_atomic(out / f"{stem}.json", json.dumps(result, indent=1) + "\n")
    write_atomic(out / f"{stem}.md", to_markdown(result))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
