"""Sweeps: Hydra's multirun syntax expanded into cells, one run folder per cell.

``python -m cmpnn_dist.train -m conf=NAME model.aggregate=sum,pna train.seed=0,1,2`` expands the
comma lists (and Hydra's ``range(...)`` / ``choice(...)``) with Hydra's own override parser into
the cartesian product of cells, exactly as Hydra's basic sweeper would, and runs every cell as
a trial of a Ray Tune experiment on the current Ray cluster
(:mod:`cmpnn_dist.distributed.tune_trials`).

A sweep lives in ``<storage_root>/sweeps/<sweep_name>/``: ``sweep.json`` (preset, overrides,
cells) and ``results.csv`` (one row per finished cell); cell ``i``'s run folder is
``<storage_root>/runs/<sweep_name>/<cell id>``.  A cell is idempotent: a cell whose run folder
holds ``results.json`` is finished and is not trained again; an unfinished one resumes from its
newest checkpoint (``resume=true``).  So a killed sweep restarted with the same command (and
``sweep_name=``) skips finished cells and resumes the others.  Ctrl-C / SIGTERM loses nothing:
every running cell finishes its step and checkpoints it, no other cell starts, and the
sweep ends with :class:`SweepInterrupted` (exit status 130 / 143).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmpnn_dist.storage.atomic import write_atomic

METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "hits@10_50", "accuracy")


@dataclass(frozen=True)
class Cell:
    """One point of the sweep: the overrides that differ between cells and its folder name."""

    overrides: tuple[str, ...]  # the swept key=value pairs of this cell, in sweep order

    @property
    def cell_id(self) -> str:
        text = ",".join(self.overrides) or "base"
        return re.sub(r"[^A-Za-z0-9_.=,@+-]", "_", text)


def expand(overrides: list[str]) -> tuple[list[str], list[Cell]]:
    """Split ``overrides`` into the fixed ones and the cells of the sweep (cartesian product of
    every sweep override, first key varying slowest), using Hydra's override grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    fixed: list[str] = []
    axes: list[list[str]] = []
    for override in parsed:
        key = override.get_key_element()
        if override.is_sweep_override():
            axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            fixed.append(f"{key}={override.get_value_element_as_str()}")
    cells = [Cell(tuple(combo)) for combo in itertools.product(*axes)]
    return fixed, cells


class CellsFailed(Exception):
    """Some cells of a sweep failed; the others ran to the end.  The command line prints the
    sweep's result line all the same and exits with status 1; the same command runs the
    failed cells again (finished cells are skipped)."""

    exit_status = 1

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["errors"])
        self.result = result

    def __str__(self) -> str:
        r = self.result
        return (
            f"sweep {Path(r['sweep_dir']).name}: {len(r['errors'])} of {r['cells']} cells "
            f"failed ({r['finished']} finished; the same command runs the failed ones again): "
            + "; ".join(r["errors"])
        )


class SweepInterrupted(BaseException):
    """The sweep stopped on SIGINT / SIGTERM: each cell that was running checkpointed its
    current step (``result["stopped"]``: cell id -> step), the cells not yet started were not
    started (``result["not_started"]``).  The same command continues the sweep.

    A BaseException, like :class:`~cmpnn_dist.training.interrupt.TrainingInterrupted`; the
    command line prints its line and the sweep's result line and exits 128 + the signal."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["stopped_by"])
        self.result = result
        self.exit_status = 128 + int(result["stopped_by"])

    def __str__(self) -> str:
        r = self.result
        how = signal.Signals(r["stopped_by"]).name
        head = f"sweep {Path(r['sweep_dir']).name} interrupted by {how}"
        tail = "; the same command continues it"
        if r.get("gave_up_after_s") is not None:
            return (
                f"{head}: its running cells did not stop within {r['gave_up_after_s']:g} s and "
                f"were stopped (each resumes from its newest checkpoint){tail}"
            )
        stopped = ", ".join(f"{cell} at step {step}" for cell, step in r["stopped"].items())
        parts = [f"{len(r['stopped'])} checkpointed" + (f" ({stopped})" if stopped else "")]
        parts.append(f"{len(r['not_started'])} not started")
        parts.append(f"{r['finished']} finished")
        if r["errors"]:
            parts.append(f"{len(r['errors'])} failed: " + "; ".join(r["errors"]))
        return f"{head}: of {r['cells']} cells " + ", ".join(parts) + tail


def sweep_dir(storage_root: str | Path, name: str) -> Path:
    return Path(storage_root).expanduser().resolve() / "sweeps" / name


def write_json(path: Path, obj: Any) -> None:
    """Atomically (temp name, then rename; a full disk is one error naming ``path``)."""
    write_atomic(path, json.dumps(obj, indent=1, default=str))


def cell_result(run_dir: Path) -> dict[str, Any] | None:
    """The finished cell's results.json, or None while it is unfinished."""
    path = run_dir / "results.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def collect(sweep: Path) -> list[dict[str, Any]]:
    """One row per finished cell: its overrides as columns plus valid_* / test_* metrics."""
    spec = json.loads((sweep / "sweep.json").read_text())
    rows = []
    for cell in spec["cells"]:
        result = cell_result(Path(cell["run_dir"]))
        if result is None:
            continue
        row: dict[str, Any] = dict(o.split("=", 1) for o in cell["overrides"])
        row["cell"] = cell["cell_id"]
        for split in ("valid", "test"):
            for k, v in (result.get(split) or {}).items():
                row[f"{split}_{k}"] = v
        rows.append(row)
    return rows


def write_results_csv(sweep: Path) -> Path:
    rows = collect(sweep)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return write_atomic(sweep / "results.csv", out.getvalue())


def default_sweep_name(preset: str) -> str:
    return f"{preset}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and *sample* standard deviation (n - 1); None for a single value."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    return mean, (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5


def summarize(sweep: Path, metrics: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Finished cells grouped over ``train.seed``: one row per design point with each metric's
    mean, sample std, seed count and the paper's value (where the paper has one)."""
    from cmpnn_dist.paper import paper_value, peer_values

    spec = json.loads((sweep / "sweep.json").read_text())
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for cell in spec["cells"]:
        result = cell_result(Path(cell["run_dir"]))
        if result is None:
            continue
        key = tuple(o for o in cell["overrides"] if not o.startswith("train.seed="))
        groups.setdefault(key, []).append({"cell": cell, "result": result})
    wanted = metrics or tuple(f"test_{m}" for m in METRICS)
    rows = []
    for key, members in groups.items():
        row: dict[str, Any] = {"point": ", ".join(key) or "(base)", "seeds": len(members)}
        sig = members[0]["cell"].get("signature", {})
        for metric in wanted:
            split, name = metric.split("_", 1)
            values = [m["result"].get(split, {}).get(name) for m in members]
            values = [float(v) for v in values if v is not None]
            if not values:
                continue
            row[metric] = _mean_std(values)
            paper = paper_value(sig, metric)
            if paper is not None:
                row[f"paper {metric}"] = paper
            for model, value in peer_values(str(sig.get("data.name")), metric).items():
                row[f"{model} {metric}"] = value
        rows.append(row)
    return rows


def hits_rule_line(sweep: Path) -> str:
    """Which ``eval.hits_negatives_rule`` the finished cells' test Hits@10_50 is under (each
    cell's result names it; cmpnn_dist/evaluation/metrics.py)."""
    spec = json.loads((sweep / "sweep.json").read_text())
    rules = set()
    for cell in spec["cells"]:
        result = cell_result(Path(cell["run_dir"]))
        if result is not None:
            rules.add(str((result.get("test") or {}).get("hits_negatives_rule", "not recorded")))
    mixed = " (differs between cells)" if len(rules) > 1 else ""
    return (
        "test_hits@10_50: Hits@10 against 50 negatives, eval.hits_negatives_rule="
        f"{', '.join(sorted(rules))}{mixed} (paper: the paper's code, HxyScotthuang/CMPNN "
        "cmpnn/task.py, C(50, i); nbfnet_pyg: NBFNet-PyG's script/run.py, C(49, i))."
    )


def report(sweep: Path) -> tuple[Path, list[Path]]:
    """Write ``report.md`` (mean +- sample std over seeds, the paper's value beside) and one PNG
    per swept design choice (metric by value) into the sweep folder; returns their paths."""
    rows = summarize(sweep)
    metrics = [m for m in (f"test_{k}" for k in METRICS) if any(m in r for r in rows)]
    lines = [f"# Sweep {sweep.name}", "", "mean +- sample std over seeds (n = seeds)", ""]
    from cmpnn_dist.paper import PEERS

    header = ["design point", "seeds"]
    for m in metrics:
        header += [m, "paper"] if any(f"paper {m}" in r for r in rows) else [m]
        header += [f"{p} (published)" for p in PEERS if any(f"{p} {m}" in r for r in rows)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    tables: set[str] = set()
    for r in rows:
        cells = [r["point"], str(r["seeds"])]
        for m in metrics:
            mean, std = r.get(m, (float("nan"), None))
            cells.append(f"{mean:.3f}" + (f" +- {std:.3f}" if std is not None else ""))
            if any(f"paper {m}" in x for x in rows):
                paper = r.get(f"paper {m}")
                cells.append(f"{paper[0]:.3f}" if paper else "-")
                if paper:
                    tables.add(paper[1])
            for p in PEERS:
                if any(f"{p} {m}" in x for x in rows):
                    cells.append(f"{r[f'{p} {m}']:.3f}" if f"{p} {m}" in r else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if tables:
        lines += ["", "Paper values from: " + ", ".join(sorted(tables)) + "."]
    if any(f"{p} {m}" in r for r in rows for p in PEERS for m in metrics):
        lines += [
            "",
            "NBFNet (published): Zhu et al., NeurIPS 2021, inductive relation "
            "prediction table (Hits@10 of 50 negatives).",
        ]
    if "test_hits@10_50" in metrics:
        lines += ["", hits_rule_line(sweep)]
    md = write_atomic(sweep / "report.md", "\n".join(lines) + "\n")
    return md, _plots(sweep, rows, metrics)


def _plots(sweep: Path, rows: list[dict[str, Any]], metrics: list[str]) -> list[Path]:
    """One PNG per swept key: the first metric's mean (and std) for each of its values."""
    if not rows or not metrics:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric = "test_mrr" if "test_mrr" in metrics else metrics[0]
    by_key: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if metric not in r:
            continue
        for part in r["point"].split(", "):
            if "=" in part:
                k, v = part.split("=", 1)
                by_key.setdefault(k, {}).setdefault(v, []).append(r[metric][0])
    paths = []
    for key, values in by_key.items():
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        labels = list(values)
        means = [sum(v) / len(v) for v in values.values()]
        ax.bar(labels, means, color="#4C72B0")
        for i, v in enumerate(values.values()):
            ax.plot([i] * len(v), v, "k.", alpha=0.6)
        ax.set_xlabel(key)
        ax.set_ylabel(f"{metric} (mean over the other keys)")
        ax.set_title(f"{sweep.name}: {key}")
        fig.tight_layout()
        path = sweep / f"plot_{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.png"
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp, dpi=120)
        plt.close(fig)
        os.replace(tmp, path)
        paths.append(path)
    return paths
