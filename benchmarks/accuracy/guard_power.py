"""How much power an accuracy guard built on a sweep of seeds would have.

Reads the finished cells of one sweep (``<storage>/runs/<sweep>/<cell>/results.json``, one
cell per seed, everything else equal) and, per metric (test MRR, test Hits@10 of 50 under the
run's rule), the seeds' mean and sample standard deviation s.  A guard that averages k fresh
seeds and fails below ``mean - z * s / sqrt(k)`` (z = 2.326: a correct commit passes with
probability 0.99 when the seeds are normal with deviation s) catches a true loss of ``delta``
with probability ``Phi(delta * sqrt(k) / s - z)``.  Because s comes from few seeds, the same
power is also given at the upper 90 % confidence bound of the deviation,
``s * sqrt((n - 1) / chi2_0.10(n - 1))``.  A cell's CPU seconds come from its training log
(``metrics.csv``'s last ``time_s``); k seeds on two cores take about ceil(k / 2) cells of wall
time.

``--pool FILE.json`` adds the cells of an earlier result of this script (another machine's
seeds of the same sweep: a CPU of another kind trains another model from the same seed, so its
runs are more draws of the same spread), each cell keeping the machine it ran on, and
``--name`` names the pooled result.  The result also gives the guard that
``tests/integration/test_fidelity_guard.py`` runs: ``GUARD_SEEDS`` fresh seeds, failing a
metric below ``mean - GUARD_Z * s_up / sqrt(k)`` with s_up the upper bound above, so that a
correct commit passes both metrics with probability >= 0.99 even when the spread is that wide,
and its power against a loss of ``delta`` at s and at s_up.

    python -m benchmarks.accuracy.guard_power --storage STORE --sweep NAME [--delta 0.03]
        [--pool OLD.json ...] [--name NAME]

Writes ``benchmarks/results/guard_power_<name>.md`` / ``.json``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from scipy import stats

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, cpu_model, git_commit
from benchmarks.harness.results import results_dir, write_atomic

HERE = Path(__file__).resolve().parent

Z = 2.326  # one-sided 0.99
METRICS = ("mrr", "hits@10_50")
GUARD_SEEDS = 2  # the guard's fresh seeds: one round of two cells on two cores
GUARD_Z = 2.576  # one-sided 0.995 per metric: both pass with probability >= 0.99


def cells(run_root: Path) -> list[dict]:
    out = []
    for cell in sorted(p for p in run_root.iterdir() if (p / "results.json").is_file()):
        res = json.loads((cell / "results.json").read_text())
        rows = list(csv.DictReader((cell / "metrics.csv").open()))
        seconds = max((float(r["time_s"]) for r in rows if r.get("time_s")), default=None)
        out.append({"cell": cell.name, "test": res["test"], "seconds": seconds,
                    "step": res.get("step")})  # fmt: skip
    return out


def power(delta: float, s: float, k: int) -> float:
    return float(stats.norm.cdf(delta * math.sqrt(k) / s - Z)) if s > 0 else 1.0


def guard(delta: float, mean: float, s: float, s_up: float, k: int = GUARD_SEEDS) -> dict:
    """The guard's threshold for one metric (``mean - GUARD_Z s_up / sqrt(k)``), its power
    against a true loss of ``delta`` when the spread is s and s_up, and its false-alarm rate
    for a correct commit at those spreads."""
    low = mean - GUARD_Z * s_up / math.sqrt(k)

    def fails(true_mean: float, sd: float) -> float:
        return float(stats.norm.cdf((low - true_mean) * math.sqrt(k) / sd))

    return {
        "seeds": k,
        "z": GUARD_Z,
        "threshold": low,
        "power_at_std": fails(mean - delta, s),
        "power_at_std_upper90": fails(mean - delta, s_up),
        "false_alarm_at_std": fails(mean, s),
        "false_alarm_at_std_upper90": fails(mean, s_up),
    }


def main() -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--storage", type=Path, required=True)
    p.add_argument("--sweep", required=True)
    p.add_argument("--delta", type=float, default=0.03)
    p.add_argument("--note", default="", help="a line on how the sweep ran")
    p.add_argument(
        "--pool",
        type=Path,
        nargs="*",
        default=[],
        help="earlier results of this script whose cells to pool with the sweep's",
    )
    p.add_argument("--name", help="the result's name (default: the sweep's)")
    args = p.parse_args()
    machine = f"{cpu_model()}, {os.cpu_count()} cores"
    found = [{**c, "machine": machine} for c in cells(args.storage / "runs" / args.sweep)]
    for old in args.pool:
        earlier = json.loads(old.read_text())
        found += [{**c, "machine": c.get("machine", earlier["machine"])} for c in earlier["cells"]]
    n = len(found)
    if n < 3:
        print(f"error: {n} finished cells in {args.storage / 'runs' / args.sweep}; need 3")
        return 1
    chi = stats.chi2.ppf(0.10, n - 1)
    summary = {}
    for m in METRICS:
        values = [c["test"][m] for c in found]
        s = statistics.stdev(values)
        s_up = s * math.sqrt((n - 1) / chi)
        summary[m] = {
            "values": values, "mean": statistics.mean(values), "std": s, "std_upper90": s_up,
            "power": {k: {"at_std": power(args.delta, s, k),
                          "at_std_upper90": power(args.delta, s_up, k)} for k in (1, 2, 3, 4)},
            "guard": guard(args.delta, statistics.mean(values), s, s_up),
        }  # fmt: skip
    secs = [c["seconds"] for c in found if c["seconds"]]
    name = args.name or args.sweep
    out = {
        "command": command_line(__file__, sys.argv[1:]),
        "machine": machine,
        "commit": git_commit("--short", mark_dirty=True),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": args.note,
        "sweep": args.sweep,
        "pooled": [str(p) for p in args.pool],
        "delta": args.delta,
        "z": Z,
        "cells": found,
        "cell_seconds_median": statistics.median(secs) if secs else None,
        "summary": summary,
    }
    lines = [
        f"# Power of an accuracy guard on sweep `{args.sweep}` ({n} runs)",
        "",
        f"- command: `{out['command']}`",
        f"- machine: {out['machine']}; {args.note}",
        f"- commit: {out['commit']}; date: {out['date']}",
        f"- rule: a guard averaging k fresh seeds fails below mean - {Z} s / sqrt(k) (a correct "
        "commit passes with probability 0.99); power = the probability it fails a true loss of "
        f"{args.delta}, at the seeds' s and at s's upper 90 % confidence bound",
        f"- training seconds per cell (median): {out['cell_seconds_median']}",
        "- runs by machine: "
        + ", ".join(
            f"{m}: {sum(c['machine'] == m for c in found)}"
            for m in dict.fromkeys(c["machine"] for c in found)
        ),
        "",
        "| metric | seeds | mean | s | s (upper 90 %) | power k=1 | k=2 | k=3 | k=4 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, v in summary.items():
        pw = " | ".join(f"{v['power'][k]['at_std']:.3f} ({v['power'][k]['at_std_upper90']:.3f})"
                        for k in (1, 2, 3, 4))  # fmt: skip
        vals = ", ".join(f"{x:.3f}" for x in v["values"])
        lines.append(f"| test {m} | {vals} | {v['mean']:.4f} | {v['std']:.4f} | "
                     f"{v['std_upper90']:.4f} | {pw} |")  # fmt: skip
    lines += ["", "Power in parentheses: at the upper bound of the deviation.", "",
              "The guard (`tests/integration/test_fidelity_guard.py`): "
              f"{GUARD_SEEDS} fresh seeds, failing a metric below "
              f"mean - {GUARD_Z} s_up / sqrt({GUARD_SEEDS}):", "",
              "| metric | threshold | power (at s / at s_up) | false alarm (at s / at s_up) |",
              "|---|---|---|---|"]  # fmt: skip
    for m, v in summary.items():
        g = v["guard"]
        lines.append(f"| test {m} | {g['threshold']:.4f} | {g['power_at_std']:.3f} / "
                     f"{g['power_at_std_upper90']:.3f} | {g['false_alarm_at_std']:.4f} / "
                     f"{g['false_alarm_at_std_upper90']:.4f} |")  # fmt: skip
    res = results_dir(__file__) / f"guard_power_{name}"
    write_atomic(res.with_suffix(".json"), json.dumps(out, indent=1) + "\n")
    write_atomic(res.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
