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

    python benchmarks/guard_power.py --storage STORE --sweep NAME [--delta 0.03]

Writes ``benchmarks/results/guard_power_<sweep>.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from provenance import command_line, cpu_model, git_commit, write_atomic  # noqa: E402

Z = 2.326  # one-sided 0.99
METRICS = ("mrr", "hits@10_50")


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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage", type=Path, required=True)
    p.add_argument("--sweep", required=True)
    p.add_argument("--delta", type=float, default=0.03)
    p.add_argument("--note", default="", help="a line on how the sweep ran")
    args = p.parse_args()
    found = cells(args.storage / "runs" / args.sweep)
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
        }  # fmt: skip
    secs = [c["seconds"] for c in found if c["seconds"]]
    out = {
        "command": command_line(__file__, sys.argv[1:]),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "commit": git_commit("--short", mark_dirty=True),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "note": args.note,
        "sweep": args.sweep,
        "delta": args.delta,
        "z": Z,
        "cells": found,
        "cell_seconds_median": statistics.median(secs) if secs else None,
        "summary": summary,
    }
    lines = [
        f"# Power of an accuracy guard on sweep `{args.sweep}` ({n} seeds)",
        "",
        f"- command: `{out['command']}`",
        f"- machine: {out['machine']}; {args.note}",
        f"- commit: {out['commit']}; date: {out['date']}",
        f"- rule: a guard averaging k fresh seeds fails below mean - {Z} s / sqrt(k) (a correct "
        "commit passes with probability 0.99); power = the probability it fails a true loss of "
        f"{args.delta}, at the seeds' s and at s's upper 90 % confidence bound",
        f"- training seconds per cell (median): {out['cell_seconds_median']}",
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
    lines += ["", "Power in parentheses: at the upper bound of the deviation."]
    res = HERE / "results" / f"guard_power_{args.sweep}"
    write_atomic(res.with_suffix(".json"), json.dumps(out, indent=1) + "\n")
    write_atomic(res.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
