"""CPU training step, side by side with NBFNet-PyG, idle and with the other core busy (issue 14).

Setting (both sides): fb237_v1 inductive split (GraIL), batch 64, 6 layers of 32, 32
negatives, every edge between the head and each scored candidate removed (ours:
``train.remove_query_edges=candidates``; NBFNet: ``remove_one_hop``), aggregation ``sum`` and
``pna``.  Every measurement is a fresh process timing whole training steps (sample, edge mask,
forward, loss, backward, Adam): a warm-up step, then ``--steps`` timed ones; the figures are
the per-batch medians of wall and process-CPU seconds, and the child's peak RSS.

Conditions: intra-op threads 1 and 2 (both sides), plus ours with ``train.num_threads=null``
(the automatic policy of ``cmpnn_dist/training/threads.py``), each on the machine as it is
("idle": other engineers share it, so the load average is recorded with every figure) and with
the other core busy (a bounded busy-loop process started and stopped by this script).  Within a
round the peer and ours run back to back for each condition, so each ratio (peer / ours) comes
from adjacent runs under the same load.

The peer is the kit in ``../shared/peers/nbfnet-pyg/`` (its README): build it once with
``bash ../shared/peers/nbfnet-pyg/setup.sh /work/peer/venv`` and pass ``--peer-venv``; its data
is laid out by its ``prepare_data.sh``.  Without the kit or the venv the peer is skipped and
the reason recorded.

    python -m benchmarks.step.train_speed_cpu [--rounds 1] [--steps 3] [--peer-venv /work/peer/venv]
    python -m benchmarks.step.train_speed_cpu --child ours sum 2 1 3   # one measurement (internal)

Writes benchmarks/results/step/train_speed_cpu.json and .md (machine, commit, every run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.peer import (
    DATA,
    Burner,
    clean_env,
    peer_status,
    prepare_data,
    step_command,
)
from benchmarks.harness.provenance import (
    command_line,
    cpu_model,
    git_commit,
    module_argv,
    ops_paths,
)
from benchmarks.harness.results import results_dir, write_atomic

REPO = Path(__file__).resolve().parents[2]
RESULTS = results_dir(__file__)
AGGS = ("sum", "pna")


# ---------------------------------------------------------------- child: our training steps
def child_ours(agg: str, threads: str, n_warm: int, n_timed: int, storage: str) -> dict:
    """Time ``n_timed`` training steps of ours in this process (after ``n_warm``)."""
    import torch

    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.threads import governor_for
    from cmpnn_dist.training.trainer import Trainer

    num_threads = None if threads == "auto" else int(threads.removesuffix("spin"))
    cfg = compose_config(
        "fb237_ind_v1",
        [
            f"model.aggregate={agg}",
            "train.batch_size=64",
            "train.remove_query_edges=candidates",
            f"storage_root={storage}",
            f"data_root={DATA}",
            "train.progress=false",
        ],
    )
    cfg.train.num_threads = num_threads
    data = load_train_data(open_dataset(ensure_dataset(cfg, progress=False)))
    governor = governor_for(cfg, data)  # what fit() does
    with tempfile.TemporaryDirectory(prefix="speed-") as run_dir:
        ctx = LocalContext(Path(run_dir), tensorboard=False)
        trainer = Trainer(cfg, data, ctx, None)
        trainer.model.train()
        times, cpu, losses, used = [], [], [], []
        with ops_paths() as ran:  # the message-passing path the steps ran (cpu: the kernel)
            for i in range(n_warm + n_timed):
                t0, c0 = time.perf_counter(), time.process_time()
                losses.append(trainer.train_step(trainer.model))
                governor.update()
                if i >= n_warm:
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                    used.append(torch.get_num_threads())
        ctx.close()
    return {
        "side": "cmpnn_dist",
        "agg": agg,
        "ops_impl": "+".join(sorted(ran)),
        "times": times,
        "cpu_times": cpu,
        "losses": losses,
        "threads": used,
        "thread_changes": [[round(t, 2), n, o] for t, n, o in governor.changes],
        "params": sum(p.numel() for p in trainer.model.parameters()),
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


# ---------------------------------------------------------------- parent
def run_child(cmd: list[str], env: dict, timeout: float) -> dict:
    load = os.getloadavg()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "loadavg_before": load}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1500:], "loadavg_before": load}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(loadavg_before=load, loadavg_after=os.getloadavg(), process_wall_s=wall)
    return out


def summarize(out: dict) -> dict:
    if "error" in out:
        return out
    keep = ("side", "agg", "threads", "thread_changes", "losses", "params", "loadavg_before",
            "ops_impl")  # fmt: skip
    row = {k: out[k] for k in keep if k in out}
    row.update(
        wall_s_median=statistics.median(out["times"]),
        cpu_s_median=statistics.median(out["cpu_times"]),
        wall_s=[round(t, 3) for t in out["times"]],
        cpu_s=[round(t, 3) for t in out["cpu_times"]],
        peak_rss_gb=out["maxrss_kb"] / 1024**2,
        loadavg_after=out["loadavg_after"],
        process_wall_s=round(out["process_wall_s"], 1),
    )
    return row


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--child", nargs=5, metavar=("SIDE", "AGG", "THREADS", "WARM", "TIMED"))
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run (sum)")
    ap.add_argument("--pna-steps", type=int, default=2, help="timed steps per run (pna)")
    ap.add_argument("--aggs", nargs="+", default=list(AGGS))
    ap.add_argument(
        "--threads",
        nargs="+",
        default=["1", "2", "auto", "2spin"],
        help="1, 2: fixed (both sides); auto: ours with train.num_threads=null; 2spin: ours "
        "with 2 threads and libgomp's default spin-waiting (before issue 14), sum only",
    )
    ap.add_argument("--loads", nargs="+", default=["idle", "busy"])
    ap.add_argument("--peer-venv", type=Path, default=Path("/work/peer/venv"))
    ap.add_argument("--storage", default="/tmp/cmpnn-speed-storage")
    ap.add_argument("--timeout", type=float, default=240.0, help="per child, seconds")
    ap.add_argument("--out", default="train_speed_cpu")
    ap.add_argument(
        "--append", action="store_true", help="add these runs to the existing results file"
    )
    args = ap.parse_args()

    if args.child:
        side, agg, threads, warm, timed = args.child
        assert side == "ours"
        if not threads.endswith("spin"):  # as `python -m cmpnn_dist.train` does
            from cmpnn_dist.openmp_env import set_openmp_defaults

            assert set_openmp_defaults(), "torch was imported before the OpenMP settings"
        print(json.dumps(child_ours(agg, threads, int(warm), int(timed), args.storage)))
        return

    commit = git_commit(mark_dirty=True)  # at the start: the code that runs
    peer_py, skip = peer_status(args.peer_venv)
    peer_data = prepare_data(Path(args.storage)) if peer_py is not None else None
    if skip:
        print(f"peer skipped: {skip}", file=sys.stderr)
    # every child starts from the same environment: no thread or OpenMP settings of the caller
    base_env = clean_env()
    runs: list[dict] = []
    plan = [
        (rnd, load, agg, threads)
        for rnd in range(args.rounds)
        for load in args.loads
        for agg in args.aggs
        for threads in args.threads
        if agg == "sum" or not threads.endswith("spin")
    ]
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    bar = tqdm(total=len(plan), desc="train_speed_cpu") if tqdm else None
    burner = None
    current_load = None
    try:
        for rnd, load, agg, threads in plan:
            if load != current_load:
                if burner is not None:
                    burner.stop()
                    burner = None
                if load == "busy":
                    burner = Burner(limit_s=1200)
                current_load = load
            steps = args.pna_steps if agg == "pna" else args.steps
            cond = {"round": rnd, "load": load, "agg": agg, "threads_arg": threads}
            sides = []
            if peer_py is not None and threads in ("1", "2"):
                env = dict(base_env, THREADS=threads)
                cmd = step_command(peer_py, peer_data, agg, steps)
                sides.append(("nbfnet-pyg", cmd, env))
            env = dict(base_env)
            cmd = [*module_argv(__file__), "--storage", args.storage, "--child", "ours", agg,
                   threads, "1", str(steps)]  # fmt: skip
            sides.append(("cmpnn_dist", cmd, env))
            if rnd % 2:  # alternate which side goes first
                sides.reverse()
            for side, cmd, env in sides:
                row = summarize(run_child(cmd, env, args.timeout))
                row.update(cond, side=side)
                runs.append(row)
                if "error" in row:
                    print(f"{side} {cond}: {row['error']}", file=sys.stderr)
            if bar:
                bar.update(1)
    finally:
        if burner is not None:
            burner.stop()
        if bar:
            bar.close()
    write_results(args, runs, skip, commit)


def pairs(runs: list[dict]) -> list[dict]:
    """Peer / ours ratios from the two runs of the same round and condition."""
    out = []
    key = ("command_index", "round", "load", "agg", "threads_arg")
    for ours in runs:
        if ours.get("side") != "cmpnn_dist" or "error" in ours:
            continue
        peer = [r for r in runs if r.get("side") == "nbfnet-pyg" and "error" not in r
                and all(r[k] == ours[k] for k in key)]  # fmt: skip
        row = {k: ours[k] for k in key}
        row.update(
            ours_wall_s=ours["wall_s_median"],
            ours_cpu_s=ours["cpu_s_median"],
            ours_rss_gb=ours["peak_rss_gb"],
            ours_threads=ours["threads"],
            ours_impl=ours.get("ops_impl", "-"),
            loadavg=ours["loadavg_before"][0],
        )
        if peer:
            p = peer[0]
            row.update(
                peer_wall_s=p["wall_s_median"],
                peer_cpu_s=p["cpu_s_median"],
                peer_rss_gb=p["peak_rss_gb"],
                wall_ratio=p["wall_s_median"] / ours["wall_s_median"],
                cpu_ratio=p["cpu_s_median"] / ours["cpu_s_median"],
            )
        out.append(row)
    return out


def write_results(args: argparse.Namespace, runs: list[dict], skip: str, commit: str) -> None:
    import torch

    command = command_line(__file__, sys.argv[1:])
    for row in runs:
        row.update(command_index=0)
    commands, commits = [command], [commit]
    old = RESULTS / f"{args.out}.json"
    if args.append and old.is_file():  # earlier invocations' runs stay, each names its command
        prev = json.loads(old.read_text())
        commands = prev["commands"] + commands
        commits = prev["commits"] + commits
        for row in runs:
            row["command_index"] = len(commands) - 1
        runs = prev["runs"] + runs
    table = pairs(runs)
    result = {
        "benchmark": "train_speed_cpu",
        "command": " ; ".join(commands),
        "commands": commands,
        "commits": commits,
        "commit": " ; ".join(dict.fromkeys(commits)),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "platform": platform.platform(),
            "node": platform.node(),
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)),
            "torch": torch.__version__,
        },
        "setting": "fb237_v1 inductive, batch 64, 6 x 32, 32 negatives, candidate edges removed; "
        "per-batch medians of whole training steps after 1 warm-up, fresh process each",
        "peer": "NBFNet-PyG via ../shared/peers/nbfnet-pyg/peer_step.py" if not skip else None,
        "peer_skipped": skip or None,
        "note": "loadavg = os.getloadavg() (1, 5, 15 min) just before each child; the machine "
        "is shared with other engineers, so 'idle' means no burner of ours. 'busy': one "
        "busy-loop process of ours running. ratio = peer / ours from adjacent runs",
        "pairs": table,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    for ext, text in (("json", json.dumps(result, indent=1)), ("md", markdown(result))):
        write_atomic(RESULTS / f"{args.out}.{ext}", text)
    print(markdown(result))


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [
        "# CPU training step: cmpnn_dist vs NBFNet-PyG (fb237_v1, batch 64, 6 x 32)",
        "",
        *[
            f"{i}. `{c}` at commit `{k}`  "
            for i, (c, k) in enumerate(zip(res["commands"], res["commits"], strict=True))
        ],
        f"written {res['date_utc']}  ",
        f"machine: {m['platform']}, {m['cpu']}, {m['cpu_count']} CPUs "
        f"(affinity {m['affinity']}), torch {m['torch']}",
        "",
        res["setting"] + ". " + res["note"] + ".",
        "",
    ]
    if res["peer_skipped"]:
        lines += [f"**Peer skipped:** {res['peer_skipped']}", ""]
    lines += [
        "| cmd | round | load | agg | threads | load avg | ours wall s | ours CPU s | ours threads "
        "| ours impl | peer wall s | peer CPU s | wall ratio | CPU ratio | ours / peer RSS GB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in res["pairs"]:
        rss = f"{p['ours_rss_gb']:.2f} / {_f(p.get('peer_rss_gb'))}"
        lines.append(
            f"| {p['command_index']} | {p['round']} | {p['load']} | {p['agg']} | "
            f"{p['threads_arg']} | "
            f"{p['loadavg']:.2f} | {p['ours_wall_s']:.2f} | {p['ours_cpu_s']:.2f} | "
            f"{sorted(set(p['ours_threads']))} | {p.get('ours_impl', '-')} | "
            f"{_f(p.get('peer_wall_s'))} | "
            f"{_f(p.get('peer_cpu_s'))} | {_f(p.get('wall_ratio'), '.1f')} | "
            f"{_f(p.get('cpu_ratio'), '.1f')} | {rss} |"
        )
    errors = [r for r in res["runs"] if "error" in r]
    if errors:
        lines += ["", "Failed runs:", ""]
        lines += [f"- {r['side']} {r['load']} {r['agg']} {r['threads_arg']}: "
                  f"{r['error'].splitlines()[-1]}" for r in errors]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
