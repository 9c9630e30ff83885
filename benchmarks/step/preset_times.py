"""How long each preset takes on this CPU: a few timed steps and evaluation batches, extrapolated.

For each preset (``conf/<name>.yaml``, unchanged): build its dataset (timed, once), then in
this process time ``--steps`` training steps (after one warm-up step) and the filtered
ranking of ``--eval-facts`` validation facts (both directions, the preset's ``eval``
batch size), with ``--threads`` torch threads (default 1).  Both the wall time and the
process CPU time are recorded: on a shared, oversubscribed machine the wall time mostly
measures the neighbours, while the CPU time of a one-thread run is close to what the same run
takes alone on one core.  Extrapolated (from each of the two)::

    epoch      = steps_per_epoch * step_s + valid_facts * eval_s_per_fact   (train + validation)
    full run   = min(epochs * steps_per_epoch, max_steps) * step_s
                 + validations * valid_facts * eval_s_per_fact + test_facts * eval_s_per_fact

The machine is shared: the 1-minute load average is recorded before and after each preset.
Presets whose raw files are absent (biokg, hetionet without their downloads) are listed as
skipped with the reason.

    python -m benchmarks.step.preset_times [--presets default trisqr ...] [--steps 3]
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit, ops_paths
from benchmarks.harness.results import results_dir, write_atomic

REPO = Path(__file__).resolve().parents[2]
RESULTS = results_dir(__file__)


def _fmt_s(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def measure(
    preset: str, storage: Path, steps: int, eval_facts: int, batch: int | None = None
) -> dict:
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.errors import UsageError
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import SplitData, load_train_data
    from cmpnn_dist.training.trainer import Trainer
    from cmpnn_dist.training.validation import evaluate_split

    load0 = os.getloadavg()[0]
    cfg = compose_config(preset, [f"storage_root={storage}", "train.device=cpu"])
    preset_batch = cfg.train.batch_size
    if batch is not None and batch < preset_batch:  # too big for this machine's memory:
        cfg.train.batch_size = batch  # time a smaller batch, scale the step time linearly
    t0 = time.perf_counter()
    try:
        path = ensure_dataset(cfg, progress=False)
    except UsageError as exc:
        return {"preset": preset, "skipped": str(exc)[:200]}
    build_s = time.perf_counter() - t0
    data = load_train_data(open_dataset(path))
    ctx = LocalContext(storage / "runs" / preset, device="cpu", tensorboard=False)
    trainer = Trainer(cfg, data, ctx, None)
    trainer.model.train()
    with ops_paths() as paths:  # which message-passing path the steps run (cpu: the kernel)
        trainer.train_step(trainer.model)  # warm-up (graph caches, allocator)
    ops_path = "+".join(sorted(paths))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        trainer.train_step(trainer.model)
    scale = preset_batch / cfg.train.batch_size
    step_s = (time.perf_counter() - t0) / steps * scale
    step_cpu = (time.process_time() - c0) / steps * scale
    spe = len(data.train.queries) // preset_batch  # as QuerySampler.steps_per_epoch
    valid = data.valid if len(data.valid.queries) else data.test
    n = min(eval_facts, len(valid.queries))
    sub = SplitData(valid.graph, valid.queries[:n], valid.filter_triples)
    cfg.eval.max_queries = None
    evaluate_split(trainer.model, SplitData(valid.graph, valid.queries[:2],
                   valid.filter_triples), trainer.graph(valid.graph), cfg,
                   data.num_relations)  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    evaluate_split(trainer.model, sub, trainer.graph(valid.graph), cfg, data.num_relations)
    per_fact = (time.perf_counter() - t0) / n
    per_fact_cpu = (time.process_time() - c0) / n
    tc = cfg.train
    total_steps = spe * tc.epochs if tc.max_steps is None else min(spe * tc.epochs, tc.max_steps)
    validations = -(-total_steps // spe)
    ctx.close()

    def extrapolate(step: float, fact: float) -> dict:
        valid_s, test_s = len(data.valid.queries) * fact, len(data.test.queries) * fact
        return {
            "step_s": round(step, 4),
            "eval_s_per_fact": round(fact, 5),
            "epoch_train_s": round(spe * step, 1),
            "epoch_valid_s": round(valid_s, 1),
            "epoch_s": round(spe * step + valid_s, 1),
            "full_run_s": round(total_steps * step + validations * valid_s + test_s, 1),
        }

    return {
        "preset": preset,
        "nodes": data.num_nodes,
        "train_facts": len(data.train.queries),
        "valid_facts": len(data.valid.queries),
        "test_facts": len(data.test.queries),
        "batch_size": preset_batch,
        "batch_timed": tc.batch_size,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "aggregate": cfg.model.aggregate,
        "steps_per_epoch": spe,
        "epochs": tc.epochs,
        "max_steps": tc.max_steps,
        "build_s": round(build_s, 2),
        "cpu": extrapolate(step_cpu, per_fact_cpu),
        "wall": extrapolate(step_s, per_fact),
        "steps_timed": steps,
        "eval_facts_timed": n,
        "threads": torch.get_num_threads(),
        "ops_path": ops_path,
        "loadavg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    parser = make_parser(__doc__, __file__)
    parser.add_argument("--presets", nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--eval-facts", type=int, default=32)
    parser.add_argument(
        "--merge", action="store_true", help="keep the other presets' rows of the last results"
    )
    parser.add_argument(
        "--batch", type=int, default=None,
        help="time this smaller batch and scale the step time (presets too big for RAM)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--storage", type=Path, default=None, help="default: a temp folder")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from cmpnn_dist.cli.common import available_presets

    presets = args.presets or available_presets()
    presets_order = available_presets()
    rows = []
    with tempfile.TemporaryDirectory(prefix="preset_times_") as tmp:
        storage = args.storage or Path(tmp)
        for preset in presets:
            row = measure(preset, storage, args.steps, args.eval_facts, args.batch)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    old = RESULTS / "preset_times_cpu.json"
    if args.merge and old.is_file():  # keep earlier runs' rows of the presets not measured now
        done = {r["preset"] for r in rows}
        kept = [r for r in json.loads(old.read_text())["rows"] if r["preset"] not in done]
        rows = sorted(kept + rows, key=lambda r: presets_order.index(r["preset"]))
    machine = (f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
               f"{torch.get_num_threads()} torch threads")  # fmt: skip
    commit = git_commit("--short")
    lines = [
        f"# Preset times on CPU ({machine}, commit {commit})",
        "",
        "`python -m benchmarks.step.preset_times [--presets ...] [--steps K] [--merge]`: K timed "
        "training steps and a few validation facts per preset (each row's `steps_timed`, "
        "`eval_facts_timed` and `loadavg_1min` (before / after) in the JSON), extrapolated; "
        "one torch thread; message passing = the `ops` path the steps ran (`cpu`: the "
        "compiled kernel); CPU time = the process's CPU seconds, wall = elapsed on this shared "
        "machine.",
        "",
        "| preset | train facts | steps/epoch | CPU s/step | epoch, CPU time (train + valid) "
        "| full run, CPU time (preset's budget) | epoch, wall | load | message passing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['preset']} | skipped: {r['skipped']} | | | | | | | |")
            continue
        budget = f"{r['epochs']} ep" + (f", {r['max_steps']} steps" if r["max_steps"] else "")
        if r.get("batch_timed", r["batch_size"]) != r["batch_size"]:
            budget += f"; timed at batch {r['batch_timed']}, scaled to {r['batch_size']}"
        c, w = r["cpu"], r["wall"]
        lines.append(
            f"| {r['preset']} | {r['train_facts']:,} | {r['steps_per_epoch']:,} | "
            f"{c['step_s']:.3f} | {_fmt_s(c['epoch_train_s'])} + {_fmt_s(c['epoch_valid_s'])} | "
            f"{_fmt_s(c['full_run_s'])} ({budget}) | {_fmt_s(w['epoch_s'])} | "
            f"{r['loadavg_1min'][0]:.1f} / {r['loadavg_1min'][1]:.1f} | "
            f"{r.get('ops_path', '?')} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"benchmark": "preset_times", "machine": machine, "commit": commit,
           "command": command_line(__file__, sys.argv[1:]),
           "rows": rows}  # fmt: skip
    for name, body in (("preset_times_cpu.json", json.dumps(out, indent=1)),
                       ("preset_times_cpu.md", text)):  # fmt: skip
        write_atomic(RESULTS / name, body)


if __name__ == "__main__":
    main()
