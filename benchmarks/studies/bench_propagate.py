"""CPU speed of the message-passing ops and of one C-MPNN training step (naive vs reference).

Graph: fb237_v1 (GraIL inductive split, train facts + inverses) from ../shared/data when
present, else a random graph of the same size (1,594 nodes, 4,245 facts, 180 relations).
Every measurement interleaves the implementations (one rep of each in turn) and reports
medians, so background load hits them alike; ratios are naive / reference.  Wall time and
process CPU time are both reported: on a shared, oversubscribed machine the CPU time of a
single-threaded run (``--threads 1``) is the stable number.

    python -m benchmarks.studies.bench_propagate [--reps 7] [--threads 2] [--batch 64]

Writes benchmarks/results/studies/propagate_cpu.json and .md.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.results import results_dir
from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.ops import propagate

ROOT = Path(__file__).resolve().parents[2]
FB_V1 = ROOT.parent / "shared" / "data" / "inductive" / "fb237_v1" / "train.txt"


def load_graph():
    if FB_V1.is_file():
        rows = [line.split("\t") for line in FB_V1.read_text().splitlines() if line.strip()]
        ents = {e: i for i, e in enumerate(sorted({r[0] for r in rows} | {r[2] for r in rows}))}
        rels = {r: i for i, r in enumerate(sorted({r[1] for r in rows}))}
        facts = np.array([[ents[h], rels[r], ents[t]] for h, r, t in rows])
        return graph_from_triples(len(ents), len(rels), facts), len(rels), "fb237_v1 train"
    rng = np.random.default_rng(0)
    n, r, f = 1594, 180, 4245
    facts = np.stack([rng.integers(0, n, f), rng.integers(0, r, f), rng.integers(0, n, f)], 1)
    return graph_from_triples(n, r, facts), r, "random, fb237_v1-sized"


def timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one call."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def bench_ops(graph, batch, dim, reps):
    r2 = graph.num_relations
    x = torch.randn(graph.num_nodes, batch, dim, requires_grad=True)
    cases = {
        "MSG1 sum": ("mul", torch.randn(batch, r2, dim, requires_grad=True), ["sum"]),
        "MSG2 sum": ("mul", torch.randn(r2, dim, requires_grad=True), ["sum"]),
        "MSG1 pna (sum,sumsq,max,min)": (
            "mul",
            torch.randn(batch, r2, dim, requires_grad=True),
            ["sum", "sumsq", "max", "min"],
        ),
        "MSG3 sum, 30 bases": (
            "basis",
            (
                torch.randn(30, dim, dim, requires_grad=True),
                torch.randn(r2, 30, requires_grad=True),
            ),
            ["sum"],
        ),
    }
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(reps):
        for name, (msg, rel, aggs) in cases.items():
            for impl in ("naive", "reference"):

                def step(msg=msg, rel=rel, aggs=aggs, impl=impl):
                    out = propagate(graph, x, rel, message=msg, aggregators=aggs, impl=impl)
                    sum(out[a].sum() for a in aggs).backward()

                times.setdefault((name, impl), []).append(timed(step))
    return times


def bench_model(graph, num_rel, batch, reps):
    heads = torch.randint(0, graph.num_nodes, (batch,), generator=torch.Generator().manual_seed(0))
    rels = torch.randint(0, 2 * num_rel, (batch,), generator=torch.Generator().manual_seed(1))
    configs = {
        "basic (sum, MSG1, INIT2, 6x32)": ModelConfig(),
        "PNA, MSG1, relation readout": ModelConfig(aggregate="pna", readout="relation"),
        "sum, MSG3 (30 bases)": ModelConfig(message=3, num_bases=30),
    }
    models = {}
    for name, cfg in configs.items():
        for impl in ("naive", "reference"):
            torch.manual_seed(0)
            m = CMPNN(cfg, num_rel, OpsConfig(impl=impl))
            models[(name, impl)] = (m, torch.optim.Adam(m.parameters(), lr=5e-3))
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(reps):
        for key, (m, opt) in models.items():

            def step(m=m, opt=opt):
                opt.zero_grad()
                logits = m(graph, heads, rels)
                torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.zeros_like(logits)
                ).backward()
                opt.step()

            times.setdefault(key, []).append(timed(step))
    return times


def table(title, times):
    """Median wall and CPU milliseconds per implementation, and naive / reference ratios."""
    names = list(dict.fromkeys(k[0] for k in times))
    lines = [
        f"### {title}",
        "",
        "| case | naive wall ms | reference wall ms | ratio | naive CPU ms | reference CPU ms "
        "| ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = {}
    for name in names:
        med = {
            impl: [statistics.median(t[i] for t in times[(name, impl)]) * 1000 for i in (0, 1)]
            for impl in ("naive", "reference")
        }
        (aw, ac), (bw, bc) = med["naive"], med["reference"]
        rows[name] = {
            "naive_wall_ms": aw,
            "reference_wall_ms": bw,
            "naive_cpu_ms": ac,
            "reference_cpu_ms": bc,
        }
        cells = [f"{aw:.1f}", f"{bw:.1f}", f"{aw / bw:.2f}", f"{ac:.1f}", f"{bc:.1f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ac / bc:.2f} |")
    return "\n".join(lines), rows


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", default=str(results_dir(__file__) / "propagate_cpu"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    graph, num_rel, source = load_graph()
    load_before = os.getloadavg()
    ops_times = bench_ops(graph, args.batch, 32, args.reps)
    model_times = bench_model(graph, num_rel, args.batch, args.reps)
    load_after = os.getloadavg()
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "loadavg_1min_before_after": [load_before[0], load_after[0]],
    }
    t1, ops_rows = table(
        f"propagate forward+backward, B={args.batch}, d=32 (median of {args.reps})", ops_times
    )
    t2, model_rows = table(
        f"training step (forward, BCE, backward, Adam), B={args.batch} queries x all "
        f"{graph.num_nodes} nodes (median of {args.reps})",
        model_times,
    )
    header = (
        f"# Message passing on CPU: naive vs reference\n\nGraph: {source}: {graph.num_nodes} "
        f"nodes, {graph.num_edges} edges (with inverses), {graph.num_relations} relations.\n"
        f"Machine: {machine}\n\nCommand: `python -m benchmarks.studies.bench_propagate --reps "
        f"{args.reps} --threads {args.threads} --batch {args.batch}`\n"
    )
    md = "\n\n".join([header, t1, t2]) + "\n"
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"graph": source, "machine": machine, "ops": ops_rows, "train_step": model_rows}
    for suffix, text in ((".json", json.dumps(payload, indent=2)), (".md", md)):
        tmp = out.with_suffix(suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, out.with_suffix(suffix))


if __name__ == "__main__":
    main()
