"""CPU cost of the generic message path against reference's hand-written kernels.

One ``ops.propagate`` forward + backward (x and relation gradients) on a random graph, for
every registered message through ``impl=generic`` and, for ``mul`` / ``basis``, through
``impl=reference``'s specialised kernels.  The cases are interleaved (one rep of each in turn)
and medians reported, so background load hits them alike; ratios are against reference
``mul`` in the same run.  Wall time and process CPU time are both recorded.

    python -m benchmarks.ops.message_functions [--reps 5] [--threads 1] [--nodes 5000]

Writes benchmarks/results/ops/message_functions_cpu.json and .md (machine and git commit named).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

import cmpnn_dist.model.messages  # noqa: F401  (registers transe, rotate)
from benchmarks.harness.args import make_parser
from benchmarks.harness.results import results_dir, write_atomic
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import propagate

ROOT = Path(__file__).resolve().parents[2]
AGGS = {"sum": ("sum",), "pna": ("sum", "sumsq", "max", "min")}


def relation(message: str, r2: int, batch: int, dim: int) -> object:
    if message == "basis":
        bases = torch.randn(4, dim, dim) / dim**0.5
        return (bases.requires_grad_(), torch.randn(r2, 4).requires_grad_())
    width = dim // 2 if message == "rotate" else dim
    return torch.randn(batch, r2, width).requires_grad_()


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--facts", type=int, default=60000)
    ap.add_argument("--relations", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--out", type=Path, default=results_dir(__file__))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n, f = args.nodes, args.facts
    facts = np.stack([rng.integers(0, n, f), rng.integers(0, args.relations, f),
                      rng.integers(0, n, f)], 1)  # fmt: skip
    graph = graph_from_triples(n, args.relations, np.unique(facts, axis=0))
    x = torch.randn(n, args.batch, args.dim, requires_grad=True)
    cases = [("reference", "mul"), ("generic", "mul"), ("reference", "basis"),
             ("generic", "basis"), ("generic", "transe"), ("generic", "rotate")]  # fmt: skip
    rels = {m: relation(m, graph.num_relations, args.batch, args.dim) for _, m in cases}
    rows = []
    for agg_name, aggs in AGGS.items():
        wall: dict = {c: [] for c in cases}
        cpu: dict = {c: [] for c in cases}
        for rep in range(args.reps + 1):  # rep 0 warms caches and scratch buffers up
            for impl, message in cases:
                rel = rels[message]
                leaves = [x, *(rel if isinstance(rel, tuple) else (rel,))]
                t, c = time.perf_counter(), time.process_time()
                out = propagate(graph, x, rel, message=message, aggregators=aggs, impl=impl)
                torch.autograd.grad(sum(out[a].sum() for a in aggs), leaves)
                if rep:
                    wall[(impl, message)].append(time.perf_counter() - t)
                    cpu[(impl, message)].append(time.process_time() - c)
        base = statistics.median(wall[("reference", "mul")])
        for impl, message in cases:
            w = statistics.median(wall[(impl, message)])
            row = dict(aggregators=agg_name, impl=impl, message=message, wall_ms=w * 1e3,
                       cpu_ms=statistics.median(cpu[(impl, message)]) * 1e3,
                       vs_reference_mul=w / base)  # fmt: skip
            rows.append(row)
            print(f"{agg_name:4s} {impl:9s} {message:7s} {w * 1e3:8.1f} ms  "
                  f"x{row['vs_reference_mul']:.2f} of reference mul")  # fmt: skip
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    payload = {
        "what": "ops.propagate forward + backward (x and relation grads), medians",
        "graph": f"random: {graph.num_nodes} nodes, {graph.num_edges} edges, "
        f"{graph.num_relations} relation ids",
        "batch": args.batch, "dim": args.dim, "reps": args.reps, "threads": args.threads,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_avg": os.getloadavg(),
        "torch": torch.__version__,
        "commit": commit,
        "rows": rows,
    }  # fmt: skip
    md = [
        f"# Message functions: generic path vs reference kernels (CPU, commit {commit})",
        "",
        f"{payload['graph']}; B = {args.batch}, d = {args.dim}, {args.threads} thread(s), "
        f"{args.reps} interleaved reps, medians; {payload['processor']}, "
        f"{payload['cpu_count']} CPUs, load average {payload['load_avg'][0]:.1f}. "
        "Command: `python -m benchmarks.ops.message_functions "
        f"--reps {args.reps} --threads {args.threads}`.",
        "",
        "| aggregators | impl | message | wall ms | CPU ms | x reference mul |",
        "|---|---|---|---|---|---|",
    ]
    md += [
        f"| {r['aggregators']} | {r['impl']} | {r['message']} | {r['wall_ms']:.1f} | "
        f"{r['cpu_ms']:.1f} | {r['vs_reference_mul']:.2f} |"
        for r in rows
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(payload, indent=2)), (".md", "\n".join(md) + "\n")):
        write_atomic(args.out / f"message_functions_cpu{suffix}", text)
    print(f"wrote {args.out}/message_functions_cpu.json and .md")


if __name__ == "__main__":
    main()
