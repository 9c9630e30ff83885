"""Training speed of the biomedical presets at real scale on this CPU, with a one-epoch projection.

For each graph -- ``biokg`` (``synthetic:biokg_scale``: 93,773 nodes, 4,762,677 training
facts) and ``hetionet`` (``synthetic:hetionet_schema``: Hetionet's real node table and
metaedge counts, PyKEEN's split, 1,800,157 training facts) -- the preset of the same name is
composed (``conf/biokg.yaml``, ``conf/hetionet.yaml``) with the paper's hyperparameter table
(appendix, biomedical section) applied on top, the dataset is built or opened, and the
training loop's own step (:meth:`Trainer.train_step`: sampler batch and negatives, query-edge
mask, forward over the whole graph, self-adversarial loss, backward, Adam) runs ``--warmup``
+ ``--steps`` times.  Reported per graph: median step seconds, training queries/s (batch /
step), resident memory (after loading the data, and the peak during the steps), the
``os.getloadavg()`` before and after the steps (the machine is shared), and the projected
hours of the paper's one epoch (``F // B`` steps, one direction per fact, x the time per
query), from the wall time and from the process CPU time.  ``--batch`` times a smaller
batch than the paper's when a full step does not fit the time budget on a loaded machine
(the projection scales per query).

    python -m benchmarks.step.bio_train_speed --graph biokg --steps 4
    python -m benchmarks.step.bio_train_speed --graph hetionet --steps 3
    python -m benchmarks.step.bio_train_speed --small --out /tmp/x     # the script itself, seconds

Each run updates its graph's entry in ``benchmarks/results/step/bio_train_cpu.json`` and rewrites
``bio_train_cpu.md`` from all entries (runs are kept under ~8 minutes by running one graph at
a time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import RssPeak
from cmpnn_dist.cli.common import compose_config
from cmpnn_dist.convert.prepare import ensure_dataset

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# the paper's table "Hyperparameters for the transductive experiments on biomedical KGs"
PAPER = {
    "biokg": {
        "model.num_layers": 6,
        "model.hidden_dim": 32,
        "model.decoder_hidden_dim": 32,
        "train.lr": 2e-4,
        "train.batch_size": 8,
        "train.num_negatives": 32,
        "train.epochs": 1,
        "train.adversarial_temperature": 0.5,
    },
    "hetionet": {
        "model.num_layers": 4,
        "model.hidden_dim": 32,
        "model.decoder_hidden_dim": 32,
        "train.lr": 2e-3,
        "train.batch_size": 64,
        "train.num_negatives": 32,
        "train.epochs": 1,
        "train.adversarial_temperature": 1.0,
    },
}
SOURCES = {
    "biokg": ("synthetic:biokg_scale", "biokg_scale", None, {"scale": 0.01}),
    "hetionet": ("synthetic:hetionet_schema", "hetionet_schema", "hetionet", {"scale": 0.002}),
}
PAPER_TRAIN_FACTS = {"biokg": 4_762_677, "hetionet": 1_800_157}
START = time.perf_counter()
NOTES = [
    "- Setup (`trainer_setup_s` in the JSON) is mostly `QuerySampler._build_filter_keys`: "
    "`np.unique` of the 2F filter keys, which numpy 2.4 answers with a hash table; for "
    "9.5 M random int64 keys that took 63 s here against 1.9 s for `np.sort` + a "
    "neighbour compare.",
    "- biokg: no step finished inside the 8-minute budget on this machine (load 15-22 on "
    "its 2 cores during 18:00-18:20 UTC: B = 8 and B = 1 each ran out of time in their "
    "first step).  For an order of magnitude: `train_step_cpu.md` (same machine, earlier, "
    "same 6 x 32 sum model with decoder 64, reference ops, B = 8) took 43.0 s a step, so the "
    "paper's epoch (595,334 steps) would take about 7,100 h here.",
    "- hetionet: one step at B = 2 (warm-up 0: a B = 2 run with a warm-up ran out of time "
    "in its second step) took 77.5 CPU s, 38.7 CPU s a query.  Scaling the 43.0 s B = 8 "
    "biokg step above by edges x layers gives about 1.4 s wall (2 threads) a query at full "
    "batch, so the 78,173 h / 19,366 CPU h projected from B = 2 are upper bounds, likely "
    "10x or more too high; a full-batch step on an idle machine is the figure still "
    "missing.  The `+dirty` commit: this notes list was edited while the run went; the "
    "code that ran is 674fc1b.",
    "- Per query, a small-batch step costs more than a full one (the reference ops do "
    "per-edge index work once per step, whatever B), so projections from `B run` < "
    "`B paper` overstate the epoch time.",
]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def config_for(graph: str, small: bool, storage_root: str) -> object:
    source, name, raw_sub, small_params = SOURCES[graph]
    cfg = compose_config(graph, [f"storage_root={storage_root}"])
    cfg.data.source, cfg.data.name = source, name + ("_small" if small else "")
    cfg.data.raw_path = None
    if raw_sub is not None and (Path(cfg.data_root) / raw_sub).is_dir():
        cfg.data.raw_path = str(Path(cfg.data_root) / raw_sub)  # the real node table
    cfg.data.synthetic = dict(small_params) if small else {}
    for key, value in PAPER[graph].items():
        section, field = key.split(".")
        setattr(getattr(cfg, section), field, value)
    cfg.train.device, cfg.train.progress = "cpu", False
    # the synthetic stand-ins carry node types but not OGB's official negatives: rank typed
    cfg.eval.protocol = "typed"
    return cfg


def measure(graph: str, args: argparse.Namespace, save) -> dict:
    """Set up the run, then time the steps; ``save(result)`` after every step, so a run
    stopped by its time budget (``--budget-s``, measured from the process start) still
    leaves its figures."""
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.trainer import Trainer

    cfg = config_for(graph, args.small, args.storage_root)
    paper_b = cfg.train.batch_size
    if args.batch is not None:
        cfg.train.batch_size = args.batch
    t0 = time.perf_counter()
    path = ensure_dataset(cfg, progress=True)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = open_dataset(path)
    data = load_train_data(ds)
    t_load = time.perf_counter() - t0
    rss_data = rss_bytes()
    print(f"{graph}: data loaded in {t_load:.1f} s", file=sys.stderr, flush=True)
    b = cfg.train.batch_size
    r = {
        "graph": graph,
        "dataset": {
            "source": cfg.data.source,
            "name": ds.name,
            "node_table": cfg.data.raw_path or "generated",
            "nodes": data.num_nodes,
            "relations": data.num_relations,
            "train_facts": len(data.train.queries),
            "valid_facts": len(data.valid.queries),
            "test_facts": len(data.test.queries),
            "message_edges": int(data.train.graph.num_edges),
            "node_types": len(ds.graph_data().node_type_names),
        },
        "config": {
            "preset": graph,
            "paper_table_applied": PAPER[graph],
            "model": asdict(cfg.model),
            "train": asdict(cfg.train),
            "ops": asdict(cfg.ops),
        },
        "build_or_open_s": round(t_build, 2),
        "load_s": round(t_load, 2),
        "rss_after_data_gb": round(rss_data / 1e9, 3),
        "warmup_steps": args.warmup,
        "paper_train_facts": PAPER_TRAIN_FACTS[graph],
        "paper_batch_size": paper_b,
        "measured_batch_size": b,
    }
    with tempfile.TemporaryDirectory() as run_dir:
        ctx = LocalContext(Path(run_dir), "cpu", tensorboard=False)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, data, ctx, None)
        r["trainer_setup_s"] = round(time.perf_counter() - t0, 2)
        r["steps_per_epoch"] = len(data.train.queries) // paper_b  # at the paper's batch
        print(f"{graph}: trainer set up in {r['trainer_setup_s']} s", file=sys.stderr, flush=True)
        model = ctx.wrap_model(trainer.model)
        model.train()
        r["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
        times, cpu, losses, loads = [], [], [], []
        with RssPeak() as peak:
            for i in range(args.warmup + args.steps):
                t0, c0 = time.perf_counter(), time.process_time()
                losses.append(trainer.train_step(model))
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                loads.append(round(os.getloadavg()[0], 2))
                print(
                    f"{graph}: step {i + 1}/{args.warmup + args.steps} {times[-1]:.2f} s "
                    f"loss {losses[-1]:.4f} load {loads[-1]:.2f}",
                    file=sys.stderr,
                    flush=True,
                )
                if i < args.warmup:
                    continue
                step_s = statistics.median(times[args.warmup :])
                cpu_s = statistics.median(cpu[args.warmup :])
                queries_epoch = r["steps_per_epoch"] * paper_b
                r.update(
                    {
                        # 6 decimals: the derived figures below must be recomputable from these
                        "step_s": [round(t, 6) for t in times],
                        "step_cpu_s": [round(t, 6) for t in cpu],
                        "median_step_cpu_s": round(cpu_s, 6),
                        "projected_epoch_cpu_hours": round(queries_epoch * cpu_s / b / 3600, 3),
                        "loadavg_1min_per_step": loads,
                        "median_step_s": round(step_s, 6),
                        "queries_per_s": round(b / step_s, 4),
                        "losses": [round(x, 5) for x in losses],
                        "rss_peak_gb": round(max(peak.peak, rss_bytes()) / 1e9, 3),
                        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                        "projected_epoch_hours": round(queries_epoch * step_s / b / 3600, 3),
                        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    }
                )
                save(r)
                elapsed = time.perf_counter() - START
                if elapsed + 1.5 * times[-1] > args.budget_s:
                    print(f"{graph}: stopping, time budget", file=sys.stderr, flush=True)
                    break
        ctx.close()
    r["rss_peak_gb"] = round(peak.peak / 1e9, 3)
    save(r)
    return r


def _hours(h: float) -> str:
    return f"{h:,.0f}" if h >= 10 else f"{h:.3g}"


def to_markdown(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# Training speed on the biomedical graphs, this CPU",
        "",
        f"- machine: {m['platform']}, {m['processor']}, {m['cpu_count']} CPU cores "
        f"(shared with other users), {m['torch_threads']} torch threads; torch {m['torch']}, "
        f"python {m['python']}",
        "- one step = the training loop's `Trainer.train_step` (sampler batch and negatives, "
        "query-edge mask, forward over the whole graph, loss, backward, Adam); the presets "
        "with the paper's hyperparameter table on top; median over the measured steps after "
        "the warm-up step",
        "- `B run` < `B paper`: the step was timed at a smaller batch to fit the time budget "
        "on this loaded machine; the projections scale per query (the work of a step is "
        "linear in B; a small batch vectorises worse, so they err on the slow side)",
        "- projected epoch = (F // B_paper) x B_paper queries (one direction per fact) x the "
        "time per query; `wall` under the load shown, `CPU` = process CPU seconds (all "
        "threads), i.e. hours on one core, about the wall time of an otherwise idle core",
        "- `load`: `os.getloadavg()` 1-minute value before the steps -> after the last",
        "",
        "| graph | nodes | train facts | layers x d | B paper / run | step s wall (each) "
        "| step CPU s | queries/s (wall) | RSS data / peak GB | load | epoch h, wall "
        "| epoch h, CPU | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in ("biokg", "hetionet"):
        r = res["results"].get(g)
        if r is None or "step_s" not in r:
            continue
        d, c = r["dataset"], r["config"]
        each = ", ".join(f"{t:.1f}" for t in r["step_s"])
        lines.append(
            f"| {g} ({d['source']}) | {d['nodes']:,} | {d['train_facts']:,} "
            f"| {c['model']['num_layers']} x {c['model']['hidden_dim']} "
            f"| {r['paper_batch_size']} / {r['measured_batch_size']} "
            f"| {r['median_step_s']:.2f} ({each}) | {r['median_step_cpu_s']:.1f} "
            f"| {r['queries_per_s']:.3g} | {r['rss_after_data_gb']:.2f} / "
            f"{r['rss_peak_gb']:.2f} | {r['loadavg_before'][0]:.1f} -> "
            f"{r['loadavg_after'][0]:.1f} | {_hours(r['projected_epoch_hours'])} "
            f"| {_hours(r['projected_epoch_cpu_hours'])} | {r['commit']} |"
        )
    lines += ["", "Commands:", ""]
    lines += [f"- `{r['command']}`" for r in res["results"].values()]
    lines += ["", "Notes:", "", *NOTES]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--graph", choices=["biokg", "hetionet", "both"], default="both")
    p.add_argument("--steps", type=int, default=3, help="measured steps")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--small", action="store_true", help="tiny graphs (checks the script)")
    p.add_argument(
        "--batch",
        type=int,
        help="queries per step instead of the paper's (the projection scales per query)",
    )
    p.add_argument(
        "--budget-s", type=float, default=480, help="stop timing steps past this (>= 1 step)"
    )
    p.add_argument("--storage-root", default=str(ROOT / "storage"))
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    out, stem = Path(args.out), "bio_train_cpu" + ("_small" if args.small else "")
    path = out / f"{stem}.json"
    res = json.loads(path.read_text()) if path.is_file() else {"results": {}}
    res["machine"] = machine()
    graphs = ["biokg", "hetionet"] if args.graph == "both" else [args.graph]
    command = command_line(__file__, argv if argv is not None else sys.argv[1:])

    def save(r: dict) -> None:
        r.update(
            {
                "commit": git_commit("--short=12", mark_dirty=True),
                "command": command,
                "machine": res["machine"],
            }
        )
        res["results"][r["graph"]] = r
        save_results(out, stem, res, to_markdown(res))

    for g in graphs:
        r = measure(g, args, save)
        print(
            f"{g}: {r['queries_per_s']:.3g} queries/s (median step {r['median_step_s']:.2f} s, "
            f"B = {r['config']['train']['batch_size']}), peak RSS {r['rss_peak_gb']:.2f} GB, "
            f"one epoch ~ {_hours(r['projected_epoch_hours'])} h on this CPU "
            f"(load {r['loadavg_before'][0]:.2f})"
        )
    print(json.dumps({g: res["results"][g]["queries_per_s"] for g in graphs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
