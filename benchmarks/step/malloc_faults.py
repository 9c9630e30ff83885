"""A CPU training step's user and system time and page faults, glibc malloc's defaults against
the project's (``cmpnn_dist/openmp_env.py``: :data:`MALLOC_DEFAULTS`, off with
``CMPNN_DIST_MALLOC=0``), side by side.

For each graph (``wn18rr``, ``fb15k237``: the presets on the transductive raw files;
``biokg``: ``conf/biokg.yaml`` on ``synthetic:biokg_scale`` at ``--biokg-scale``), each
propagation (``dense``; ``pruned``: ``model.propagation=pruned`` at ``--node-ratio``) and each
side (``default``: ``CMPNN_DIST_MALLOC=0``; ``tuned``: the product's setting), a fresh child
process does what ``python -m cmpnn_dist.train`` does before its first step
(``set_openmp_defaults()`` before torch is imported, the seed, the :class:`Trainer`), with
one torch thread, then runs ``--warmup`` steps (graph caches, the kernel, the heap growing to
its high-water mark) and ``--steps`` measured ones.  Per measured step: user and system CPU
seconds and minor faults (``getrusage(RUSAGE_SELF)`` around :meth:`Trainer.train_step`, the
same as the difference of two step budgets), and the losses of every step, which must be the
same floats on both sides (the allocator must not change the math); the peak resident set
(``ru_maxrss``) at the end.  The sides run interleaved, ``--rounds`` times (the order flips
every round); the tables give medians over rounds of each run's per-step median.

    python -m benchmarks.step.malloc_faults --rounds 3 --storage /work/faults_store
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
from benchmarks.harness.results import results_dir

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = results_dir(__file__)
SIDES = {"default": {"CMPNN_DIST_MALLOC": "0"}, "tuned": {"CMPNN_DIST_MALLOC": "1"}}
PRESETS = {"wn18rr": "wn18rr", "fb15k237": "fb15k237", "biokg": "biokg"}


def child(args: argparse.Namespace) -> None:
    from cmpnn_dist.openmp_env import set_openmp_defaults, tune_malloc

    applied_before_torch = set_openmp_defaults()  # as `python -m cmpnn_dist.train` does
    import resource

    import torch

    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.rng import seed_everything
    from cmpnn_dist.training.trainer import Trainer

    torch.set_num_threads(1)
    over = [f"storage_root={args.storage}", "train.device=cpu", "train.num_threads=1"]
    if args.prop == "pruned":
        over += ["model.propagation=pruned", f"model.prune.node_ratio={args.node_ratio}"]
    cfg = compose_config(PRESETS[args.graph], over)
    if args.graph == "biokg":  # no ogbl-biokg files here: the synthetic graph in its shape
        cfg.data.source, cfg.data.raw_path = "synthetic:biokg_scale", None
        cfg.data.name = f"biokg_scale_{args.biokg_scale:g}"
        cfg.data.synthetic = {"scale": args.biokg_scale}
        cfg.eval.protocol = "typed"
        cfg.train.batch_size = args.biokg_batch
    cfg.train.progress = False
    data = load_train_data(open_dataset(ensure_dataset(cfg, progress=False)))
    ctx = LocalContext(
        Path(args.storage) / "runs" / f"malloc_{args.graph}_{args.prop}",
        device="cpu",
        tensorboard=False,
    )
    seed_everything(cfg.train.seed)
    trainer = Trainer(cfg, data, ctx, None)
    trainer.model.train()

    def usage() -> tuple[float, float, int]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, r.ru_minflt

    losses, steps = [], []
    for i in range(args.warmup + args.steps):
        u0, s0, f0 = usage()
        losses.append(trainer.train_step(trainer.model))
        u1, s1, f1 = usage()
        if i >= args.warmup:
            steps.append({"user_s": u1 - u0, "sys_s": s1 - s0, "minflt": f1 - f0})
    ctx.close()
    print(
        "RESULT "
        + json.dumps(
            {
                "losses": [repr(x) for x in losses],
                "steps": steps,
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                "nodes": data.num_nodes,
                "batch": cfg.train.batch_size,
                "malloc": tune_malloc({"CMPNN_DIST_MALLOC": "0"}) or None,
                "malloc_env": {
                    k: v for k, v in os.environ.items() if k.startswith(("MALLOC_", "CMPNN"))
                },
                "set_before_torch": applied_before_torch,
                "threads": torch.get_num_threads(),
            }
        ),
        flush=True,
    )


def run_child(args: argparse.Namespace, graph: str, prop: str, side: str) -> dict:
    from benchmarks.harness.provenance import module_argv

    cmd = [*module_argv(__file__), "--child", "--graph", graph, "--prop", prop]
    cmd += ["--storage", str(args.storage), "--warmup", str(args.warmup)]
    cmd += ["--steps", str(args.steps), "--node-ratio", str(args.node_ratio)]
    cmd += ["--biokg-scale", str(args.biokg_scale), "--biokg-batch", str(args.biokg_batch)]
    env = {**os.environ, **SIDES[side], "PYTHONPATH": str(ROOT)}
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        return {"error": (out.stderr or out.stdout)[-2000:]}
    res = json.loads(lines[-1][len("RESULT ") :])
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["loadavg_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return res


def summarise(runs: list[dict]) -> dict:
    ok = [r for r in runs if "steps" in r]
    if not ok:
        return {}

    def med(key: str) -> float:
        return statistics.median(statistics.median(s[key] for s in r["steps"]) for r in ok)

    user, sys_s, flt = med("user_s"), med("sys_s"), med("minflt")
    return {
        "user_s": round(user, 3),
        "sys_s": round(sys_s, 3),
        "sys_share": round(sys_s / (user + sys_s), 3) if user + sys_s else None,
        "minflt": int(flt),
        "peak_rss_gb": round(statistics.median(r["peak_rss_gb"] for r in ok), 2),
        "runs": len(ok),
    }


def write(args: argparse.Namespace, cells: dict, started: str, load0: tuple) -> None:
    import torch

    from benchmarks.harness.provenance import command_line, git_commit
    from benchmarks.harness.results import write_atomic

    rows, summary = [], {}
    for (graph, prop), sides in cells.items():
        s = {side: summarise(runs) for side, runs in sides.items()}
        losses = {
            side: [r["losses"] for r in runs if "losses" in r] for side, runs in sides.items()
        }
        all_losses = [x for v in losses.values() for x in v]
        same = bool(all_losses) and all(x == all_losses[0] for x in all_losses)
        summary[f"{graph}/{prop}"] = {**s, "same_losses": same}
        d, t = s.get("default", {}), s.get("tuned", {})
        if not d or not t:
            rows.append(f"| {graph} | {prop} | (incomplete) |" + " |" * 10)
            continue
        runs0 = next(r for r in sides["tuned"] if "steps" in r)
        rows.append(
            f"| {graph} ({runs0['nodes']:,} nodes) | {prop} | {runs0['batch']} "
            f"| {d['user_s']:.2f} / {t['user_s']:.2f} | {d['sys_s']:.2f} / {t['sys_s']:.2f} "
            f"| {d['sys_share']:.0%} / {t['sys_share']:.0%} "
            f"| {d['minflt']:,} / {t['minflt']:,} "
            f"| {d['user_s'] + d['sys_s']:.2f} / {t['user_s'] + t['sys_s']:.2f} "
            f"| {d['peak_rss_gb']:.2f} / {t['peak_rss_gb']:.2f} | {same} "
            f"| {min(d['runs'], t['runs'])} |"
        )
    load1 = os.getloadavg()
    cmd = command_line(__file__, sys.argv[1:])
    head = (
        f"Commit `{git_commit('--short', mark_dirty=True)}`, {platform.node() and 'vm'} "
        f"{platform.machine()}, {os.cpu_count()} CPUs (shared), torch {torch.__version__}, "
        f"{platform.libc_ver()[0]} {platform.libc_ver()[1]}, started {started}, load (1/5/15 min) "
        f"before {' '.join(f'{x:.2f}' for x in load0)}, "
        f"after {' '.join(f'{x:.2f}' for x in load1)}."
    )
    md = [
        "# A CPU training step's system time and page faults: glibc malloc's defaults against the "
        "project's",
        "",
        head,
        f"Command: `{cmd}`.",
        "",
        f"Each cell: a fresh process per side (`default`: `CMPNN_DIST_MALLOC=0`, glibc's "
        f"parameters; `tuned`: `cmpnn_dist/openmp_env.py`'s `MALLOC_DEFAULTS` applied by "
        f"`set_openmp_defaults()`), 1 torch thread, `OMP_WAIT_POLICY=PASSIVE`, "
        f"`THP_MEM_ALLOC_ENABLE=1` on both, {args.warmup} warm-up steps then {args.steps} "
        f"measured; per step (`getrusage` around `Trainer.train_step`), median over the steps, "
        f"then over {args.rounds} interleaved rounds.  `a / b` = default / tuned.  `losses "
        f"same`: every step's loss the same float on both sides and every round.  Pruned: "
        f"`model.propagation=pruned model.prune.node_ratio={args.node_ratio}`.  biokg: "
        f"`synthetic:biokg_scale` at scale {args.biokg_scale:g} (no ogbl-biokg files here), "
        f"batch {args.biokg_batch}.",
        "",
        "| graph | propagation | batch | user CPU s/step | system CPU s/step | system share "
        "| minor faults/step | CPU s/step | peak RSS GB | losses same | rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    if args.note:
        md += ["Notes:", "", *[f"- {n}" for n in args.note], ""]
    out = {
        "command": cmd,
        "commit": git_commit(mark_dirty=True),
        "started": started,
        "loadavg_before": load0,
        "loadavg_after": load1,
        "torch": torch.__version__,
        "libc": platform.libc_ver(),
        "cpu_count": os.cpu_count(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "summary": summary,
        "runs": {f"{g}/{p}": sides for (g, p), sides in cells.items()},
        "notes": args.note,
    }
    name = args.out
    write_atomic(RESULTS / f"{name}.json", json.dumps(out, indent=1))
    write_atomic(RESULTS / f"{name}.md", "\n".join(md))


def main() -> None:
    parser = make_parser(__doc__, __file__)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--graph", default="wn18rr", help=argparse.SUPPRESS)
    parser.add_argument("--prop", default="dense", help=argparse.SUPPRESS)
    parser.add_argument("--graphs", nargs="+", default=["wn18rr", "fb15k237", "biokg"])
    parser.add_argument("--props", nargs="+", default=["dense", "pruned"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--node-ratio", type=float, default=0.05)
    parser.add_argument("--biokg-scale", type=float, default=0.1)
    parser.add_argument("--biokg-batch", type=int, default=8)
    parser.add_argument("--storage", type=Path, default=Path("/tmp/malloc_faults_store"))
    parser.add_argument("--out", default="malloc_faults_cpu", help="results file name")
    parser.add_argument("--note", action="append", default=[], help="a line for Notes")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()
    cells: dict = {}
    for rnd in range(args.rounds):
        order = list(SIDES) if rnd % 2 == 0 else list(SIDES)[::-1]
        for graph in args.graphs:
            for prop in args.props:
                for side in order:
                    res = run_child(args, graph, prop, side)
                    res["round"] = rnd
                    cells.setdefault((graph, prop), {s: [] for s in SIDES})[side].append(res)
                    print(graph, prop, side, rnd, summarise([res]) or res, flush=True)
                    write(args, cells, started, load0)


if __name__ == "__main__":
    main()
