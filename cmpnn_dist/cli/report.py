"""``python -m cmpnn_dist.report RUN_DIR``: PNG plots and a summary of a run's ``metrics.csv``.

``metrics.csv`` (written by :class:`cmpnn_dist.training.context.LocalContext` and the Ray
driver) has one row per history entry: ``kind`` = ``train`` (``step, epoch, loss, lr,
time_s``), ``valid`` (``valid_mrr``, ``valid_hits@k``, ...) or ``test`` (``test_*``); the
``*_protocol`` / ``*_ties`` / ``*_hits_negatives_rule`` columns are text (how the split was
ranked: :data:`~cmpnn_dist.evaluation.metrics.RESULT_LABELS`), the rest numbers.

Writes, into ``RUN_DIR/plots/`` (each file written to a temporary name, then renamed):

* ``training.png``: training loss per step (raw and a moving average) and the learning rate;
* ``validation.png``: validation metrics in [0, 1] (MRR, Hits@k, accuracy) per step, with the
  epoch on the top axis and the final test metrics as stars (only when validation ran).

Prints a summary table and the plot paths on stderr; the last stdout line is one JSON object
``{"run_dir", "plots", "summary"}``.  A folder without ``metrics.csv`` is one error line
(exit status 2).
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.errors import UsageError
from cmpnn_dist.evaluation.metrics import RESULT_LABELS

HELP_CONFIG_KEYS = False  # --help: this module's usage, not the training keys

# metrics drawn on the validation plot (all in [0, 1]); mean rank and counts are not
UNIT_METRICS = ("mrr", "hits@1", "hits@3", "hits@10", "hits@10_50", "accuracy")
# text columns of metrics.csv: how a split was ranked (``valid_protocol=all``,
# ``test_ties=pessimistic``); every other column but ``kind`` is a number
TEXT_SUFFIXES = tuple(f"_{label}" for label in RESULT_LABELS)


def read_metrics(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Rows of ``metrics.csv`` by kind; numbers as float, empty cells dropped."""
    rows: dict[str, list[dict[str, Any]]] = {"train": [], "valid": [], "test": []}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "kind" not in reader.fieldnames:
                raise UsageError(f"{path}: line 1: no 'kind' column (not a metrics.csv)")
            for lineno, raw in enumerate(reader, start=2):
                row: dict[str, Any] = {}
                for key, value in raw.items():
                    if key is None or value in (None, ""):
                        continue
                    if key == "kind" or key.endswith(TEXT_SUFFIXES):
                        row[key] = value
                        continue
                    try:
                        row[key] = float(value)
                    except ValueError:
                        raise UsageError(
                            f"{path}: line {lineno}: {key}={value!r} is not a number"
                        ) from None
                rows.setdefault(row.get("kind", ""), []).append(row)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from exc
    return rows


def epochs_trained(train: list[dict[str, Any]]) -> float | None:
    """Epochs the run has trained, as a fraction (0.73 = 73 % of the first epoch): the last
    row's ``epochs_done``, else steps / steps per epoch once the run got past its first epoch,
    else None (a run still in its first epoch, logged without ``epochs_done``)."""
    if not train:
        return None
    if "epochs_done" in train[-1]:
        return float(train[-1]["epochs_done"])
    spe = steps_per_epoch(train)
    return None if spe is None else max(r["step"] for r in train) / spe


def summarize(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Steps, epochs (a fraction), final loss, best validation MRR (and its step), test."""
    train = [r for r in rows["train"] if "loss" in r]
    valid = [r for r in rows["valid"] if "valid_mrr" in r]
    out: dict[str, Any] = {
        "steps": int(max((r["step"] for r in train), default=0)),
        "epochs": epochs_trained(train),
        "final_loss": train[-1]["loss"] if train else None,
        "final_lr": train[-1].get("lr") if train else None,
        "train_seconds": train[-1].get("time_s") if train else None,
        "best_valid_mrr": None,
        "best_valid_step": None,
        "test": {},
    }
    if valid:
        best = max(valid, key=lambda r: r["valid_mrr"])  # earliest on ties, as the trainer
        out["best_valid_mrr"] = best["valid_mrr"]
        out["best_valid_step"] = int(best["step"])
    if rows["test"]:
        last = rows["test"][-1]
        out["test"] = {k[5:]: v for k, v in last.items() if k.startswith("test_")}
    return out


def _moving_average(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _save(fig: Any, path: Path) -> None:
    """Render ``fig`` to ``path`` atomically (temporary name in the same folder, rename)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def plot_training(rows: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """Loss (raw and moving average) and learning rate against the step."""
    from matplotlib.figure import Figure

    train = [r for r in rows["train"] if "loss" in r]
    steps = [r["step"] for r in train]
    loss = [r["loss"] for r in train]
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax, ax_lr = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    ax.plot(steps, loss, color="tab:blue", alpha=0.3, linewidth=0.8, label="loss (per step)")
    window = max(1, len(loss) // 50)
    if window > 1:
        smooth = _moving_average(loss, window)
        ax.plot(steps, smooth, color="tab:blue", linewidth=1.8, label=f"mean of {window} steps")
    ax.set_ylabel("training loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    _epoch_axis(ax, train)
    lrs = [(r["step"], r["lr"]) for r in train if "lr" in r]
    if lrs:
        ax_lr.plot([s for s, _ in lrs], [v for _, v in lrs], color="tab:orange")
    ax_lr.set_ylabel("learning rate")
    ax_lr.set_xlabel("step")
    ax_lr.grid(alpha=0.3)
    fig.suptitle(f"training: {len(train)} steps")
    _save(fig, path)
    return path


def steps_per_epoch(train: list[dict[str, Any]]) -> int | None:
    """Steps of the first epoch when the run got past it (train rows of epoch 0), else None."""
    if not any(r.get("epoch", 0) >= 1 for r in train):
        return None
    return sum(1 for r in train if r.get("epoch", 0) == 0) or None


def _epoch_axis(ax: Any, train: list[dict[str, Any]]) -> None:
    """A top axis in epochs (step / steps per epoch) and dotted lines at each epoch's end."""
    spe = steps_per_epoch(train)
    if spe is None:
        return
    top = ax.secondary_xaxis("top", functions=(lambda s: s / spe, lambda e: e * spe))
    top.set_xlabel("epoch")
    last = max(r["step"] for r in train)
    for k in range(1, min(int(last // spe), 50) + 1):
        ax.axvline(k * spe, color="grey", linestyle=":", linewidth=0.8)


def plot_validation(rows: dict[str, list[dict[str, Any]]], path: Path) -> Path | None:
    """Validation metrics in [0, 1] against the step (epoch on the top axis); test as stars."""
    fig = validation_figure(rows)
    if fig is None:
        return None
    _save(fig, path)
    return path


def validation_figure(rows: dict[str, list[dict[str, Any]]]) -> Any:
    """The figure of :func:`plot_validation` (None without validation rows).  The x axis runs
    from step 0 to the last logged step, so one validation point sits where it was taken; the
    legend (one entry per metric, one for the test stars) is outside the axes, beside them."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    valid = [r for r in rows["valid"] if any(f"valid_{m}" in r for m in UNIT_METRICS)]
    if not valid:
        return None
    fig = Figure(figsize=(8.8, 4.5), layout="constrained")
    ax = fig.subplots()
    test = rows["test"][-1] if rows["test"] else {}
    for i, metric in enumerate(m for m in UNIT_METRICS if any(f"valid_{m}" in r for r in valid)):
        pts = [(r["step"], r[f"valid_{metric}"]) for r in valid if f"valid_{metric}" in r]
        color = f"C{i}"
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", color=color, label=metric)
        if f"test_{metric}" in test:
            ax.plot(
                [test.get("step", pts[-1][0])], [test[f"test_{metric}"]], marker="*",
                markersize=13, color=color, linestyle="none",
            )  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("validation metric")
    ax.set_ylim(max(0.0, ax.get_ylim()[0] - 0.05), 1.02)
    last = max(r["step"] for k in ("train", "valid", "test") for r in rows[k] if "step" in r)
    ax.set_xlim(0, last * 1.04 + 0.5)
    ax.grid(alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    if test:
        star = Line2D([], [], marker="*", markersize=11, color="grey", linestyle="none")
        handles.append(star)
        star.set_label("test (final)")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="valid")
    _epoch_axis(ax, [r for r in rows["train"] if "step" in r])
    n = len(valid)
    fig.suptitle(f"validation: {n} evaluation{'s' if n != 1 else ''}")
    return fig


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != 0 and abs(value) < 1e-2:
        return f"{value:.3g}"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def epochs_text(epochs: float | None) -> str:
    """``0.73 epoch``, ``1 epoch``, ``2.5 epochs``; ``-`` when unknown."""
    if epochs is None:
        return "- (still in the first epoch)"
    text = f"{epochs:.2f}".rstrip("0").rstrip(".")
    return f"{text} epoch{'s' if epochs > 1 else ''}"


def summary_table(summary: dict[str, Any]) -> str:
    lines = [
        ("steps", summary["steps"]),
        ("trained", epochs_text(summary["epochs"])),
        ("final loss", summary["final_loss"]),
        ("final lr", summary["final_lr"]),
        ("train seconds", summary["train_seconds"]),
        ("best valid MRR", summary["best_valid_mrr"]),
        ("  at step", summary["best_valid_step"]),
    ]
    lines += [(f"test {k}", v) for k, v in summary["test"].items() if k != "num_queries"]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {_fmt(v)}" for k, v in lines)


def report(run_dir: Path) -> dict[str, Any]:
    """Write the plots of ``run_dir`` and return ``{"run_dir", "plots", "summary"}``."""
    csv_path = run_dir / "metrics.csv"
    if not csv_path.is_file():
        what = "does not exist" if not run_dir.exists() else "has no metrics.csv"
        raise UsageError(
            f"{run_dir} {what}; pass a run folder (storage/runs/<run_name>) of a run that "
            "logged at least one step"
        )
    rows = read_metrics(csv_path)
    if not any("loss" in r for r in rows["train"]):
        raise UsageError(f"{csv_path}: no training rows yet (kind=train with a loss)")
    out_dir = run_dir / "plots"
    out_dir.mkdir(exist_ok=True)
    plots = [plot_training(rows, out_dir / "training.png")]
    valid_plot = plot_validation(rows, out_dir / "validation.png")
    if valid_plot is not None:
        plots.append(valid_plot)
    summary = summarize(rows)
    print(summary_table(summary), file=sys.stderr)
    for p in plots:
        print(f"wrote {p}", file=sys.stderr)
    if valid_plot is None:
        print("no validation rows yet: validation.png not written", file=sys.stderr)
    return {"run_dir": str(run_dir), "plots": [str(p) for p in plots], "summary": summary}


def _main(argv: list[str]) -> dict[str, Any]:
    if len(argv) != 1 or argv[0].startswith("-"):
        raise UsageError("usage: python -m cmpnn_dist.report RUN_DIR  (a storage/runs/<name>)")
    return report_location(argv[0])


def report_location(location: str) -> dict[str, Any]:
    """:func:`report` of a run folder given as a local path or a URI (the URI's metrics.csv is
    fetched into a temporary folder and the plots uploaded to ``<run>/plots/``)."""
    import shutil
    import tempfile

    from cmpnn_dist.storage import fs

    local = fs.local_path(location)
    if local is not None:
        return report(local)
    csv_uri = fs.join(location, "metrics.csv")
    if not fs.is_file(csv_uri):
        raise UsageError(f"{location} has no metrics.csv; pass a run folder of a run that logged")
    tmp = Path(tempfile.mkdtemp(prefix="cmpnn-report-"))
    try:
        (tmp / "metrics.csv").write_text(fs.read_text(csv_uri))
        out = report(tmp)
        fs.upload_tree(tmp / "plots", fs.join(location, "plots"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["run_dir"] = location
    out["plots"] = [fs.join(location, "plots", Path(p).name) for p in out["plots"]]
    return out


def main() -> None:
    sys.exit(run_cli(_main))
