"""Batch scoring (``python -m cmpnn_dist.predict.batch``) against the one-query predict API.

For each graph a tiny checkpoint is trained (``python -m cmpnn_dist.train``, a few steps:
speed does not depend on the weights), then the same queries are answered, side by side in
interleaved rounds:

* ``one-at-a-time``: ``Predictor.predict(head=..., relation=..., topk=K)`` once per head, in
  this process, torch threads = ``--threads``;
* ``batch, W worker(s)``: the batch-scoring job (in this process, on a local Ray started once
  here with ``--threads`` x 2 CPUs), ``cluster.cpus_per_worker=--threads`` (each worker's torch
  threads), W = 1 and 2.  queries/s = queries / the job's scoring time (from every worker
  holding its model to the last part written); the job's whole time (actors started, models
  loaded, parts written) is reported beside it.

Graphs: ``rule_kg`` (``conf/default.yaml``: t0 from every type-A head, top 10) and
``hetionet`` (``synthetic:hetionet_schema`` at ``--scale``, Hetionet's real node table from
``shared/data/hetionet``, ``conf/hetionet.yaml``'s 4 x 32 model: ``CtD`` (Compound treats
Disease) from every Compound, ``top_k=all``, i.e. every Compound x Disease pair).  Medians of
``--rounds`` rounds.

    python -m benchmarks.serving.batch_scoring  # -> results/serving/batch_scoring_cpu.md, .json
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

GRAPHS = {
    "rule_kg": {
        "train": ["train.max_steps=20", "eval.max_queries=32"],
        "relation": "t0",
        "heads": "type:A",
        "top_k": "10",
    },
    "hetionet": {
        "train": [
            "conf=hetionet", "data.source=synthetic:hetionet_schema",
            "data.raw_path=${data_root}/hetionet", "train.max_steps=5", "eval.max_queries=16",
            "checkpoint.every_steps=5",
        ],
        "relation": "CtD",
        "heads": "type:Compound",
        "top_k": "all",
    },
}  # fmt: skip


def train(graph: str, root: Path, scale: float) -> Path:
    if (root / "runs" / graph / "checkpoints").is_dir():  # --storage of an earlier call
        return root / "runs" / graph
    extra = list(GRAPHS[graph]["train"])
    if graph == "hetionet":
        extra += [f"data.name=hetionet_schema_{scale:g}", f"+data.synthetic.scale={scale}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable, "-m", "cmpnn_dist.train", *extra, f"storage_root={root}",
        f"run_name={graph}", "train.progress=false", "train.device=cpu",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"training {graph} failed:\n{proc.stderr[-3000:]}")
    return root / "runs" / graph


def batch_job(args: list[str]) -> dict:
    from cmpnn_dist.cli.batch import _main
    from cmpnn_dist.cli.common import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_cli(_main, args)
    if status:
        raise SystemExit(f"batch job failed: {err.getvalue()[-3000:]}")
    return json.loads(out.getvalue().strip().splitlines()[-1])


def measure(graph: str, run: Path, rounds: int, threads: int, scratch: Path) -> dict:
    import torch

    from cmpnn_dist.predict import Predictor
    from cmpnn_dist.predict.batch_heads import select_heads

    spec = GRAPHS[graph]
    p = Predictor.from_checkpoint(run, device="cpu")
    rel = p.relations.ids[spec["relation"]]
    heads = [p.entities.names[i] for i in select_heads(spec["heads"], p.dataset.graph_data(
        "train"), p.entities, rel)]  # fmt: skip
    one = torch.tensor([rel])
    candidates = int(p.candidate_mask(one, one)[0].sum())
    k = candidates if spec["top_k"] == "all" else int(spec["top_k"])
    base = [
        f"ckpt={run}", f"relation={spec['relation']}", f"heads={spec['heads']}",
        f"top_k={spec['top_k']}", "progress=false", f"cluster.cpus_per_worker={threads}",
        "train.device=cpu", "part_size=16",
    ]  # fmt: skip
    rows = {"one_at_a_time": [], "batch_1": [], "batch_2": []}
    whole = {"batch_1": [], "batch_2": []}
    n_rows = None
    for r in range(rounds):
        torch.set_num_threads(threads)
        t = time.perf_counter()
        count = sum(len(p.predict(head=h, relation=spec["relation"], topk=k)) for h in heads)
        rows["one_at_a_time"].append(len(heads) / (time.perf_counter() - t))
        for w in (1, 2):
            out = scratch / f"{graph}_{r}_{w}"
            res = batch_job([*base, f"out={out}", f"cluster.num_workers={w}"])
            assert res["rows"] == count, (res["rows"], count)
            rows[f"batch_{w}"].append(res["queries_per_s"])
            whole[f"batch_{w}"].append(res["num_queries"] / res["seconds"])
            shutil.rmtree(out)
        n_rows = count
        print(graph, r, {key: round(v[-1], 1) for key, v in rows.items()}, flush=True)
    g = p.graph
    med = {key: statistics.median(v) for key, v in rows.items()}
    return {
        "graph": graph,
        "nodes": g.num_nodes,
        "edges": g.num_edges,
        "model": p.model.__class__.__name__,
        "relation": spec["relation"],
        "heads": spec["heads"],
        "queries": len(heads),
        "candidates": candidates,
        "top_k": k,
        "rows": n_rows,
        "batch_size": p.batch_size,
        "queries_per_s": rows,
        "job_queries_per_s_end_to_end": whole,
        "median_queries_per_s": med,
        "median_end_to_end": {key: statistics.median(v) for key, v in whole.items()},
        "speedup_1": med["batch_1"] / med["one_at_a_time"],
        "speedup_2": med["batch_2"] / med["one_at_a_time"],
    }


def markdown(result: dict) -> str:
    lines = [
        "# Batch scoring against the one-query predict API (CPU)",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']}",
        f"- load: {result['load']}",
        f"- commit: {result['commit']}",
        f"- date: {result['date']}",
        f"- torch threads: {result['threads']} on both sides (the one-query loop, each worker), "
        "the product's OpenMP and huge-page settings (`cmpnn_dist/openmp_env.py`) and the same "
        "priority on both sides (Ray's workers at nice 0, `RAY_worker_niceness=0`); "
        f"medians of {result['rounds']} interleaved rounds; queries/s of the batch job = "
        "queries / scoring time (workers holding their models -> last part written); "
        "`end to end` also counts starting the actors, loading the model in each, and the "
        "Ray calls (Ray itself started once)",
        "",
        "| graph | queries (heads, relation, top k) | one-at-a-time q/s | batch 1 worker q/s | "
        "batch 2 workers q/s | x (1 worker) | x (2 workers) | end to end q/s (1 / 2) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in result["graphs"]:
        m, e = g["median_queries_per_s"], g["median_end_to_end"]
        lines.append(
            f"| {g['graph']} ({g['nodes']:,} nodes, {g['edges']:,} edges) | {g['queries']} "
            f"({g['heads']}, {g['relation']}, {g['top_k']} of {g['candidates']}; "
            f"{g['rows']:,} rows) | {m['one_at_a_time']:.1f} | {m['batch_1']:.1f} | "
            f"{m['batch_2']:.1f} | {g['speedup_1']:.2f} | {g['speedup_2']:.2f} | "
            f"{e['batch_1']:.1f} / {e['batch_2']:.1f} |"
        )
    lines += ["", "Per round (queries/s):", ""]
    for g in result["graphs"]:
        lines.append(f"- {g['graph']}: " + "; ".join(
            f"{key} " + ", ".join(f"{v:.1f}" for v in vals)
            for key, vals in g["queries_per_s"].items()))  # fmt: skip
    lines += ["", *result["notes"], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--graphs", nargs="+", default=["rule_kg", "hetionet"], choices=list(GRAPHS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scale", type=float, default=0.01, help="hetionet_schema scale")
    ap.add_argument("--storage", default=None, help="storage root (default: a temp folder)")
    ap.add_argument("--load", default="", help="what else ran on the machine (for the header)")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    # the same process settings on both sides: the product's OpenMP / huge-page defaults in
    # this process (the one-query loop) as in the Ray actors (driver._worker_env), and the
    # actors at this process's priority, not Ray's default worker niceness of 15, so both
    # sides compete alike with whatever else runs on the machine
    from cmpnn_dist.openmp_env import set_openmp_defaults

    set_openmp_defaults()
    os.environ.setdefault("RAY_worker_niceness", "0")
    import ray
    import torch

    storage = Path(args.storage or tempfile.mkdtemp(prefix="batch_scoring_"))
    scratch = Path(tempfile.mkdtemp(prefix="batch_scoring_out_"))
    load_before = os.getloadavg()[0]
    runs = {g: train(g, storage, args.scale) for g in args.graphs}
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")  # a loaded machine
    ray.init(address="local", num_cpus=2 * args.threads, include_dashboard=False,
             log_to_driver=False)  # fmt: skip
    try:
        graphs = [measure(g, runs[g], args.rounds, args.threads, scratch) for g in args.graphs]
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()[0]
    notes = [
        "Notes:",
        "",
        f"- hetionet: `synthetic:hetionet_schema` at scale {args.scale:g} (edges x scale, "
        "nodes x sqrt(scale), Hetionet's real node table): the full-size graph (47,031 nodes, "
        "2.25 M edges) takes about a second a query on this CPU, too long for the time box; "
        "every Compound of the scaled graph is asked, `top_k=all`: every Compound x Disease "
        "pair is scored and written.",
        "- Both sides run the same model forward (`Predictor.scores`); the job batches "
        "`eval.batch_size` heads a forward, restricts and sorts the candidates of the whole "
        "batch at once and writes Arrow columns instead of one DataFrame per query.",
    ]
    result = {
        "benchmark": "batch_scoring",
        "command": command_line(__file__, argv or sys.argv[1:]),
        "machine": f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} CPU cores "
        f"(a VM shared with other jobs), no GPU; torch {torch.__version__}",
        "load": f"1-minute load average {load_before:.1f} before -> {load_after:.1f} after"
        + (f"; {args.load}" if args.load else ""),
        "commit": git_commit("--short", mark_dirty=True),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "threads": args.threads,
        "rounds": args.rounds,
        "scale": args.scale,
        "graphs": graphs,
        "notes": notes,
    }
    md = markdown(result)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "batch_scoring_cpu.json", json.dumps(result, indent=1))
    write_atomic(out / "batch_scoring_cpu.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
