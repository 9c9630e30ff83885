"""The CPU training step with the compiled kernel and without it (``CMPNN_DIST_CPU_KERNEL=0``:
today's pure-torch reference path), side by side.

Same setting as ``benchmarks/step/train_speed_cpu.py`` (fb237_v1, batch 64, 6 x 32, 32 negatives,
candidate edges removed, aggregation ``sum`` and ``pna``), each measurement a fresh process
(``train_speed_cpu.py --child ours``: one warm-up step, then timed ones; per-batch medians of
wall and process-CPU seconds), the two paths interleaved within each round (which goes first
alternates), the same thread count and OpenMP environment on both sides, the load average
recorded before each child.

    python -m benchmarks.step.train_step_cpu_kernel [--rounds 3] [--threads 1] [--aggs sum pna]

Writes ``benchmarks/results/step/train_step_cpu_kernel.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def child(agg: str, threads: str, kernel: bool, steps: int, storage: str, timeout: float) -> dict:
    drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["CMPNN_DIST_CPU_KERNEL"] = "1" if kernel else "0"
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, str(HERE / "train_speed_cpu.py"), "--storage", storage, "--child",
           "ours", agg, threads, "1", str(steps)]  # fmt: skip
    load = os.getloadavg()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "loadavg_before": load}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-1500:], "loadavg_before": load}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    path = [ln for ln in proc.stderr.splitlines() if "CPU message passing" in ln]
    return {
        "path": path[0] if path else "(no kernel line: no mul layer ran)",
        "cpu_s": statistics.median(out["cpu_times"]),
        "wall_s": statistics.median(out["times"]),
        "cpu_times": out["cpu_times"],
        "losses": out["losses"],
        "loadavg_before": load,
        "loadavg_after": os.getloadavg(),
    }


def main() -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", nargs="+", default=["1"])
    ap.add_argument("--aggs", nargs="+", default=["sum", "pna"])
    ap.add_argument("--steps", type=int, default=2, help="timed steps per child")
    ap.add_argument("--storage", default="/tmp/cmpnn-speed-storage")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--out", default=str(results_dir(__file__)))
    ap.add_argument("--name", default="train_step_cpu_kernel", help="results file stem")
    args = ap.parse_args()
    commit = git_commit("--short", mark_dirty=True)
    runs = []
    for rnd in range(args.rounds):
        for agg in args.aggs:
            for threads in args.threads:
                order = [True, False] if rnd % 2 == 0 else [False, True]
                for kernel in order:
                    row = child(agg, threads, kernel, args.steps, args.storage, args.timeout)
                    row.update(round=rnd, agg=agg, threads=threads, kernel=kernel)
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    table = []
    for agg in args.aggs:
        for threads in args.threads:
            for rnd in range(args.rounds):
                pair = {r["kernel"]: r for r in runs if (r["round"], r["agg"], r["threads"])
                        == (rnd, agg, threads) and "error" not in r}  # fmt: skip
                if len(pair) == 2:
                    table.append({
                        "agg": agg, "threads": threads, "round": rnd,
                        "kernel_cpu_s": pair[True]["cpu_s"],
                        "reference_cpu_s": pair[False]["cpu_s"],
                        "ratio": pair[False]["cpu_s"] / pair[True]["cpu_s"],
                        "load": pair[True]["loadavg_before"][0],
                    })  # fmt: skip
    result = {
        "commit": commit,
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "command": command_line(__file__, sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
        "pairs": table,
    }
    lines = [
        "# CPU training step: compiled kernel vs the pure-torch reference path",
        "",
        f"Commit `{commit}`, {result['machine']}, {result['date_utc']}.  Command: "
        f"`{result['command']}`.  fb237_v1, batch 64, 6 x 32, candidate edges removed; "
        "per-batch medians of process-CPU seconds, fresh process each, the two paths "
        "interleaved per round; load = 1-min load average before the kernel's child.",
        "",
        "| agg | threads | round | load | kernel CPU s | reference CPU s | reference / kernel |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(f"| {r['agg']} | {r['threads']} | {r['round']} | {r['load']:.1f} | "
                     f"{r['kernel_cpu_s']:.3f} | {r['reference_cpu_s']:.3f} | "
                     f"{r['ratio']:.2f}x |")  # fmt: skip
    for agg in args.aggs:
        for threads in args.threads:
            rows = [r for r in table if r["agg"] == agg and r["threads"] == threads]
            if rows:
                lines.append(
                    f"\n{agg}, {threads} thread(s): median kernel "
                    f"{statistics.median(r['kernel_cpu_s'] for r in rows):.3f} CPU-s, reference "
                    f"{statistics.median(r['reference_cpu_s'] for r in rows):.3f}, ratio "
                    f"{statistics.median(r['ratio'] for r in rows):.2f}x"
                )
    out = Path(args.out)
    write_atomic(out / f"{args.name}.json", json.dumps(result, indent=1) + "\n")
    write_atomic(out / f"{args.name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
