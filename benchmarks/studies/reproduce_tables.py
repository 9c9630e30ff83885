"""The paper's initialisation, readout and transductive tables as sweeps of the product.

Every table is one ``python -m cmpnn_dist.train -m ...`` sweep (Hydra multirun grammar, cells
run as Ray Tune trials) and one ``python -m cmpnn_dist.sweep <storage_root>/sweeps/NAME``
report (mean +- sample std over seeds, the paper's value beside each cell).

    python -m benchmarks.studies.reproduce_tables --plan  # full-protocol commands + projections
    python -m benchmarks.studies.reproduce_tables --run [--epochs 1] [--only init_wn18rr_ind_v1]

``--run`` runs a REDUCED budget (``train.epochs=E``, one seed, one CPU per cell so two cells
run at once on a 2-core machine) of the sweeps in ``REDUCED``, then their reports, and writes
``benchmarks/results/reproduce_tables_cpu.{md,json}``.  A reduced budget is not the paper's
protocol (20 epochs, 5 seeds); the numbers only show whether the design choice's ordering
appears early in training.  Sweeps are idempotent: finished cells are not trained again.

Projection model (``project``): a cell's CPU time = epochs x (train + validation CPU seconds
per epoch of its preset, measured by ``benchmarks/step/preset_times.py`` in
``results/preset_times_cpu.json``) + test facts x eval CPU seconds per fact, times the
PNA / sum step ratio measured in ``results/train_step_cpu.json`` (2.65x) when the cell
aggregates with PNA and its preset was timed with sum (or divided by it the other way round).
A sweep's CPU time is the sum over its cells (seeds x design points); its idle wall time on a
machine with C cores running C one-thread cells at once is CPU time / C.  On a shared machine
wall time is 3-5x that (the presets' measured wall / CPU ratio is in the JSON).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line
from benchmarks.harness.results import results_dir, write_atomic

REPO = Path(__file__).resolve().parents[2]
RESULTS = results_dir(__file__)
PAPER_SEEDS = 5  # "averaged results of five independent runs" (appendix F / G)
PNA_OVER_SUM = 113.928 / 43.017  # train_step_cpu.json: pna / sum reference step, same graph


def _sweep(name: str, preset: str, axes: dict[str, list], fixed: tuple[str, ...] = ()) -> dict:
    return {"name": name, "preset": preset, "axes": axes, "fixed": list(fixed)}


# the full-protocol sweeps: the paper's tables (Huang et al. 2023), five seeds each
FULL = [
    *[
        _sweep(f"init_{p}", p, {"model.init": [0, 1, 2, 3]})
        for p in ("wn18rr_ind_v1", "fb237_ind_v1")
    ],
    *[
        _sweep(
            f"readout_{p}",
            p,
            {"model.readout": ["none", "sum", "relation"]},
            ("model.aggregate=pna", "model.message=1"),
        )  # fmt: skip
        for p in ("wn18rr_ind_v1", "fb237_ind_v1")
    ],
    _sweep("transductive_wn18rr_rgcn", "wn18rr_rgcn", {}),
    _sweep("transductive_wn18rr_compgcn", "wn18rr_compgcn", {}),
    # C-MPNN-basic of transductive-table-1: sum, MSG 1, INIT 2, no readout (paper.py's entry),
    # the wn18rr preset itself; the aggregate is named so the projection scales the PNA-timed row
    _sweep("transductive_wn18rr_cmpnn", "wn18rr", {}, ("model.aggregate=sum",)),
]


def command(sweep: dict, seeds: list[int], extra: tuple[str, ...] = (), name: str = "") -> str:
    """The product's sweep command for ``sweep`` over ``seeds``."""
    parts = ["python", "-m", "cmpnn_dist.train", "-m", f"conf={sweep['preset']}"]
    parts += [f"{k}={','.join(map(str, v))}" for k, v in sweep["axes"].items()]
    parts += sweep["fixed"] + list(extra)
    parts += [f"train.seed={','.join(map(str, seeds))}", f"sweep_name={name or sweep['name']}"]
    return " ".join(shlex.quote(p) for p in parts)


def _preset_times(extra: Path | None) -> dict:
    """preset_times_cpu.json's rows, plus rows of presets it lacks (the R-MPNN baselines) from
    ``extra`` (a ``preset_times.py --presets ...`` JSON) or, without it, those kept in the
    previous reproduce_tables_cpu.json."""
    data = json.loads((RESULTS / "preset_times_cpu.json").read_text())
    rows = {r["preset"]: r for r in data["rows"]}
    if extra is not None:
        more = json.loads(extra.read_text())
        extra_rows = {"machine": more["machine"], "commit": more["commit"], "rows": more["rows"]}
    elif (RESULTS / "reproduce_tables_cpu.json").is_file():
        old = json.loads((RESULTS / "reproduce_tables_cpu.json").read_text())
        extra_rows = old.get("extra_preset_times") or {"rows": []}
    else:
        extra_rows = {"rows": []}
    for r in extra_rows["rows"]:
        rows.setdefault(r["preset"], r)
    return {"meta": {k: data[k] for k in ("machine", "commit")}, "rows": rows,
            "extra": extra_rows}  # fmt: skip


def project(sweep: dict, seeds: int, epochs: int | None, times: dict, cores: int = 2) -> dict:
    """Projected CPU seconds of ``sweep`` (model in the module docstring)."""
    row = times["rows"].get(sweep["preset"])
    if row is None or "cpu" not in row:
        return {"cpu_s": None, "note": f"{sweep['preset']} not timed in preset_times_cpu.json"}
    cpu, wall = row["cpu"], row["wall"]
    n_epochs = epochs or row["epochs"]
    cell_s = n_epochs * cpu["epoch_s"] + row["test_facts"] * cpu["eval_s_per_fact"]
    agg = next((f.split("=")[1] for f in sweep["fixed"] if f.startswith("model.aggregate=")),
               row["aggregate"])  # fmt: skip
    factor = 1.0
    if agg != row["aggregate"]:
        factor = PNA_OVER_SUM if agg == "pna" else 1 / PNA_OVER_SUM
    points = 1
    for values in sweep["axes"].values():
        points *= len(values)
    cells = points * seeds
    total = cells * cell_s * factor
    return {"cells": cells, "epochs": n_epochs, "cell_cpu_s": round(cell_s * factor, 1),
            "cpu_s": round(total, 1), "idle_wall_s": round(total / cores, 1),
            "aggregate_factor": round(factor, 2), "timed_aggregate": row["aggregate"],
            "shared_wall_over_cpu": round(wall["epoch_s"] / cpu["epoch_s"], 2)}  # fmt: skip


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "not timed"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip() or "unknown"


def plan(times: dict) -> list[dict]:
    out = []
    for sweep in FULL:
        seeds = list(range(PAPER_SEEDS))
        out.append({"sweep": sweep["name"], "command": command(sweep, seeds),
                    "projection": project(sweep, PAPER_SEEDS, None, times)})  # fmt: skip
    return out


def _cells_span(runs: Path) -> float | None:
    """Seconds from the first cell's start (its TensorBoard event file's timestamp) to the last
    cell's results.json: the sweep's training wall time even when this call skipped it."""
    starts = [int(p.name.split(".")[3]) for p in runs.glob("*/tensorboard/events.out.tfevents.*")]
    ends = [p.stat().st_mtime for p in runs.glob("*/results.json")]
    return round(max(ends) - min(starts), 1) if starts and ends else None


def run_reduced(
    names: list[str],
    epochs: int,
    storage: str,
    rename: dict[str, str] | None = None,
    on_done: Any = None,
) -> list[dict]:
    """Run the reduced-budget sweeps (one seed, ``epochs`` epochs) and their reports;
    ``rename`` maps a sweep to the ``sweep_name`` of an earlier run of the same command."""
    done = []
    for sweep in [s for s in FULL if s["name"] in names]:
        name = (rename or {}).get(sweep["name"], f"{sweep['name']}_ep{epochs}")
        extra = (f"train.epochs={epochs}", "cluster.cpus_per_worker=1", f"storage_root={storage}")
        cmd = command(sweep, [0], extra, name)
        print(f"$ {cmd}", file=sys.stderr, flush=True)
        t0 = time.time()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        rc = subprocess.run(["nice", "-n", "10", *shlex.split(cmd)], cwd=REPO, env=env).returncode
        wall = time.time() - t0
        folder = Path(storage).expanduser().resolve() / "sweeps" / name
        span = _cells_span(Path(storage).expanduser().resolve() / "runs" / name)
        rep = subprocess.run([sys.executable, "-m", "cmpnn_dist.sweep", str(folder)], cwd=REPO,
                             capture_output=True, text=True)  # fmt: skip
        done.append({"sweep": name, "command": cmd, "rc": rc, "wall_s": round(wall, 1),
                     "cells_span_s": span,
                     "report_cmd": f"python -m cmpnn_dist.sweep {folder}",
                     "report": rep.stdout, "report_rc": rep.returncode})  # fmt: skip
        if on_done is not None:  # results written after every sweep: a late kill keeps them
            on_done(done)
    return done


def write(reduced: list[dict], full: list[dict], epochs: int, times: dict) -> None:
    machine = f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs"
    load = [round(x, 2) for x in os.getloadavg()]
    commit = _git_commit()
    md = [
        "# The paper's INIT / readout / transductive tables on CPU (reduced budget)",
        "",
        f"- machine: {machine}; commit {commit}; load average at write (1/5/15 min): {load}",
        f"- command: `{command_line(__file__, sys.argv[1:])}`",
        "",
        f"## Reduced budget: {epochs} epoch(s), 1 seed -- NOT the paper's protocol",
        "",
        f"The paper trains 20 epochs and averages {PAPER_SEEDS} seeds; these cells are trained "
        f"{epochs} epoch(s) with seed 0 (no std), one CPU each, two cells at once. They show "
        "only whether a design choice's effect is visible early; the `paper` column is the "
        "paper's fully trained figure.",
        "",
    ]
    for r in reduced:
        md += [f"### `{r['sweep']}` (exit {r['rc']}; cells trained in "
               f"{_fmt_s(r['cells_span_s'])} wall, first start to last result)", "",
               f"`{r['command']}`", "", f"report: `{r['report_cmd']}`", "",
               r["report"].replace("# Sweep", "Sweep").strip(), ""]  # fmt: skip
    md += [
        "## Full protocol (20 epochs, 5 seeds): commands and projected times",
        "",
        "Projection: cell CPU time = epochs x (train + valid CPU s per epoch of the preset, "
        f"`preset_times_cpu.json`, commit {times['meta']['commit']}) + test facts x eval CPU "
        f"s per fact, x {PNA_OVER_SUM:.2f} (PNA / sum step ratio, `train_step_cpu.json`) when "
        "the aggregation differs from the timed preset's; sweep = cells x cell; idle wall = "
        "CPU / 2 cores (two one-thread cells at once); a shared machine adds its "
        "wall / CPU ratio (last column). Presets missing from `preset_times_cpu.json` (the "
        "R-MPNN baselines) were timed with `preset_times.py --presets wn18rr_rgcn "
        "wn18rr_compgcn --steps 3 --eval-facts 16` (machine and commit "
        f"{times['extra'].get('machine', '-')}, {times['extra'].get('commit', '-')}; only 3 "
        "steps, on a loaded machine: rough).",
        "",
        "| sweep | cells | cell CPU | sweep CPU | idle wall (2 cores) | shared wall/CPU "
        "| command |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in full:
        p = f["projection"]
        md.append(
            f"| {f['sweep']} | {p.get('cells', '-')} | {_fmt_s(p.get('cell_cpu_s'))} | "
            f"{_fmt_s(p.get('cpu_s'))} | {_fmt_s(p.get('idle_wall_s'))} | "
            f"{p.get('shared_wall_over_cpu', '-')} | `{f['command']}` |"
        )
    out = {"benchmark": "reproduce_tables", "machine": machine, "commit": commit,
           "loadavg": load, "budget": {"epochs": epochs, "seeds": [0], "cpus_per_cell": 1},
           "protocol_note": "reduced budget, not the paper's protocol (20 epochs, 5 seeds)",
           "reduced": reduced, "full": full, "pna_over_sum": round(PNA_OVER_SUM, 3),
           "preset_times": times["meta"], "extra_preset_times": times["extra"]}  # fmt: skip
    for path, text in (("reproduce_tables_cpu.md", "\n".join(md) + "\n"),
                       ("reproduce_tables_cpu.json", json.dumps(out, indent=1))):  # fmt: skip
        write_atomic(RESULTS / path, text)
    print("\n".join(md))


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--plan", action="store_true", help="print the full commands + projections")
    ap.add_argument("--run", action="store_true", help="run the reduced-budget sweeps")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--only", nargs="*", default=["init_wn18rr_ind_v1"],
                    help="reduced sweeps to run (names in FULL)")  # fmt: skip
    ap.add_argument("--storage", default="/tmp/bench17/storage")
    ap.add_argument(
        "--extra-times",
        type=Path,
        default=None,
        help="preset_times.py JSON of presets preset_times_cpu.json lacks",
    )
    ap.add_argument(
        "--sweep-name",
        nargs="*",
        default=[],
        metavar="SWEEP=NAME",
        help="reuse an earlier sweep_name (its finished cells are skipped)",
    )
    args = ap.parse_args()
    times = _preset_times(args.extra_times)
    full = plan(times)
    if args.plan or not args.run:
        for f in full:
            p = f["projection"]
            print(f"{f['sweep']}: {_fmt_s(p.get('cpu_s'))} CPU, "
                  f"{_fmt_s(p.get('idle_wall_s'))} idle wall\n  {f['command']}")  # fmt: skip
        if not args.run:
            return
    rename = dict(x.split("=", 1) for x in args.sweep_name)
    run_reduced(args.only, args.epochs, args.storage, rename,
                lambda done: write(done, full, args.epochs, times))  # fmt: skip


if __name__ == "__main__":
    main()
