"""``python -m cmpnn_dist.sweep SWEEP_DIR``: the report of a (partly) finished sweep
(:mod:`cmpnn_dist.runs.sweep`)."""

from __future__ import annotations

import sys
from pathlib import Path

from cmpnn_dist.runs.sweep import report, write_results_csv


def main(argv: list[str] | None = None) -> int:
    """``python -m cmpnn_dist.sweep SWEEP_DIR``: write the report of a (partly) finished sweep."""
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(
            "python -m cmpnn_dist.sweep SWEEP_DIR: the report of a (partly) finished sweep.\n\n"
            "SWEEP_DIR is <storage_root>/sweeps/<sweep_name> (a folder with sweep.json), made by\n"
            "python -m cmpnn_dist.train -m conf=NAME key=a,b train.seed=0,1,2 sweep_name=NAME.\n"
            "Writes results.csv (one row per finished cell), report.md (mean +- std over seeds,\n"
            "the paper's number beside each cell it has) and a PNG per swept key, and prints\n"
            "the report."
        )
        return 0
    if len(args) != 1 or not (Path(args[0]) / "sweep.json").is_file():
        print("error: usage: python -m cmpnn_dist.sweep SWEEP_DIR (a folder with sweep.json)",
              file=sys.stderr)  # fmt: skip
        return 2
    folder = Path(args[0])
    write_results_csv(folder)
    md, plots = report(folder)
    print(md.read_text())
    print(f"report: {md}; plots: {', '.join(map(str, plots)) or 'none'}", file=sys.stderr)
    return 0
