"""CPU time of a training step, before and after thread-invariant math, idle and with a core busy.

Two checkouts side by side (``--before PATH``, e.g. the main checkout, and this one), each a
fresh process per measurement that times whole training steps the way ``fit`` runs them
(``Trainer.train_step`` then the thread governor's ``update``), under the default
``train.num_threads=null`` (the governor) on both sides: a warm-up of ``--warm`` steps, then
``--steps`` timed ones; per-step process CPU and wall seconds, their medians.  Presets: the
default run (``python -m cmpnn_dist.train``'s synthetic graph, batch 16) and
``conf=fb237_ind_v1`` (batch 8).

Loads: ``idle`` (no process of ours; the machine is shared, so the load average is recorded
before each child) and ``busy`` (one spin loop ``python -c 'while True: pass'`` pinned to core 1
with ``taskset``, started and stopped by this script).  Rounds are interleaved: in each round
every (load, preset) runs both checkouts back to back, their order alternating between rounds.

    python -m benchmarks.studies.seed_determinism --before /work/main [--rounds 3] [--steps 20]
    python -m benchmarks.studies.seed_determinism --child default 20 3  # one measurement

Writes benchmarks/results/studies/seed_determinism_cpu.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, cpu_model, git_commit
from benchmarks.harness.results import results_dir, write_atomic

REPO = Path(__file__).resolve().parents[2]
RESULTS = results_dir(__file__)
PRESETS = ("default", "fb237_ind_v1")


def child(preset: str, steps: int, warm: int) -> dict:
    """Time ``steps`` training steps of ``preset`` in this process (the checkout on
    PYTHONPATH), after ``warm`` untimed ones."""
    from cmpnn_dist.openmp_env import set_openmp_defaults

    set_openmp_defaults()  # as `python -m cmpnn_dist.train` does, before torch loads
    import tempfile

    import torch

    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.threads import governor_for
    from cmpnn_dist.training.trainer import Trainer

    cfg = compose_config(preset, ["train.progress=false"])
    cfg.storage_root = os.environ["SEED_BENCH_STORE"]
    cfg.data_root = str(REPO.parent / "shared" / "data")
    data = load_train_data(ensure_dataset(cfg, progress=False), cfg.eval.filter)
    governor = governor_for(cfg, data)
    cpu, wall, used = [], [], []
    with tempfile.TemporaryDirectory(prefix="seed-bench-") as run_dir:
        ctx = LocalContext(Path(run_dir), tensorboard=False, announce=False)
        trainer = Trainer(cfg, data, ctx, None)
        trainer.model.train()
        for i in range(warm + steps):
            c0, w0 = time.process_time(), time.perf_counter()
            trainer.train_step(trainer.model)
            governor.update()
            if i >= warm:
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
                used.append(torch.get_num_threads())
        ctx.close()
    return {"cpu_s": cpu, "wall_s": wall, "threads": used, "torch": torch.__version__}


class Spinner:
    """``python -c 'while True: pass'`` pinned to core 1 (the "busy" load)."""

    def __init__(self) -> None:
        cmd = ["taskset", "-c", "1", sys.executable, "-c", "while True: pass"]
        self.proc = subprocess.Popen(cmd)
        time.sleep(1.0)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def measure(side: str, repo: Path, preset: str, args: argparse.Namespace) -> dict:
    path = os.pathsep.join([str(repo), str(REPO)])  # that checkout's cmpnn_dist, this harness
    env = {**os.environ, "PYTHONPATH": path, "SEED_BENCH_STORE": args.store}
    cmd = [sys.executable, __file__, "--child", preset, str(args.steps), str(args.warm)]
    load = os.getloadavg()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        return {"side": side, "preset": preset, "error": proc.stderr.strip()[-800:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "side": side,
        "preset": preset,
        "loadavg_before": [round(v, 2) for v in load],
        "cpu_median_s": statistics.median(out["cpu_s"]),
        "wall_median_s": statistics.median(out["wall_s"]),
        "threads": sorted(set(out["threads"])),
        **out,
    }


def table(runs: list[dict]) -> list[str]:
    """Medians over rounds of each side's per-round median, per (load, preset)."""
    lines = [
        "| load | preset | before CPU ms / step | after CPU ms / step | after / before (CPU) "
        "| before wall ms | after wall ms | threads before / after | load avg (1 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for load in ("idle", "busy"):
        for preset in PRESETS:
            cell = [r for r in runs if r["load"] == load and r["preset"] == preset]
            if not cell:
                continue
            by = {s: [r for r in cell if r["side"] == s and "error" not in r] for s in SIDES}
            if not all(by.values()):
                continue
            cpu = {s: 1e3 * statistics.median(r["cpu_median_s"] for r in by[s]) for s in SIDES}
            wall = {s: 1e3 * statistics.median(r["wall_median_s"] for r in by[s]) for s in SIDES}
            threads = {s: sorted({n for r in by[s] for n in r["threads"]}) for s in SIDES}
            loads = [r["loadavg_before"][0] for r in cell]
            lines.append(
                f"| {load} | {preset} | {cpu['before']:.1f} | {cpu['after']:.1f} "
                f"| {cpu['after'] / cpu['before']:.3f} | {wall['before']:.0f} "
                f"| {wall['after']:.0f} | {threads['before']} / {threads['after']} "
                f"| {min(loads):.1f} - {max(loads):.1f} |"
            )
    return lines


SIDES = ("before", "after")


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--child", nargs=3, metavar=("PRESET", "STEPS", "WARM"))
    ap.add_argument("--before", type=Path, help="the checkout to compare against")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--loads", nargs="+", default=["idle", "busy"])
    ap.add_argument("--store", default="/tmp/seed_bench_store", help="datasets' storage root")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    if args.child:
        preset, steps, warm = args.child
        print(json.dumps(child(preset, int(steps), int(warm))))
        return
    if args.before is None:
        ap.error("--before PATH is required")
    repos = {"before": args.before.resolve(), "after": REPO}
    runs: list[dict] = []
    for rnd in range(args.rounds):
        for load in args.loads:
            spinner = Spinner() if load == "busy" else None
            try:
                for preset in PRESETS:
                    order = SIDES if rnd % 2 == 0 else SIDES[::-1]
                    for side in order:
                        run = measure(side, repos[side], preset, args)
                        run.update(round=rnd, load=load)
                        runs.append(run)
                        print(json.dumps({k: v for k, v in run.items() if k[-2:] != "_s"}))
            finally:
                if spinner is not None:
                    spinner.stop()
    commits = {
        "before": subprocess.run(
            ["git", "-C", str(repos["before"]), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "after": git_commit(mark_dirty=True),
    }
    meta = {
        "command": command_line(__file__, sys.argv[1:]),
        "commits": commits,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.platform()}, {cpu_model()}, {os.cpu_count()} CPUs",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / "seed_determinism_cpu.json", json.dumps({**meta, "runs": runs}))
    text = [
        "# Training step CPU time: thread-invariant math against the checkout before it",
        "",
        f"command: `{meta['command']}`  ",
        f"before: `{commits['before']}` ({repos['before']}), after: `{commits['after']}`  ",
        f"date: {meta['date']}  ",
        f"machine: {meta['machine']}",
        "",
        "Per-step process CPU and wall time of whole training steps (train.num_threads=null, "
        "the governor, on both sides), median over the timed steps of a fresh process, then "
        f"median over {args.rounds} interleaved rounds.  idle: no process of ours (the machine "
        "is shared: the 1-minute load average before each child is in the last column); busy: "
        "a spin loop pinned to core 1.",
        "",
        *table(runs),
        "",
    ]
    write_atomic(RESULTS / "seed_determinism_cpu.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
