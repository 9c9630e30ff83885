"""``python -m cmpnn_dist.report RUN_DIR``: PNG plots and summary from a metrics.csv fixture."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.cli.report import _main

COLUMNS = [
    "kind",
    "step",
    "epoch",
    "loss",
    "lr",
    "time_s",
    "valid_mr",
    "valid_mrr",
    "valid_hits@1",
    "valid_hits@10",
    "valid_num_queries",
    "test_mrr",
    "test_hits@10",
]


def fixture_rows() -> list[dict]:
    """3 epochs of 4 steps; validation after each epoch; best valid MRR 0.625 at step 8."""
    rows = []
    losses = [1.4, 1.2, 1.1, 1.0, 0.9, 0.85, 0.8, 0.75, 0.7, 0.72, 0.68, 0.6125]
    for i, loss in enumerate(losses):
        step, epoch = i + 1, i // 4
        rows.append({"kind": "train", "step": step, "epoch": epoch, "loss": loss, "lr": 1e-3,
                     "time_s": 0.5 * step})  # fmt: skip
        if step % 4 == 0:
            mrr = {4: 0.5, 8: 0.625, 12: 0.6}[step]
            rows.append({"kind": "valid", "step": step, "epoch": epoch, "valid_mr": 3.0,
                         "valid_mrr": mrr, "valid_hits@1": mrr - 0.2, "valid_hits@10": 0.9,
                         "valid_num_queries": 20})  # fmt: skip
    rows.append({"kind": "test", "step": 12, "epoch": 3, "test_mrr": 0.58, "test_hits@10": 0.875})
    return rows


def write_metrics(run: Path, rows: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)


def test_report_writes_valid_pngs_and_the_fixture_numbers(tmp_path, capsys):
    from matplotlib.image import imread

    run = tmp_path / "run"
    write_metrics(run, fixture_rows())
    assert run_cli(_main, [str(run)]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out.strip().splitlines()[-1])
    plots = [Path(p) for p in result["plots"]]
    assert plots == [run / "plots" / "training.png", run / "plots" / "validation.png"]
    for p in plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = imread(p)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400
        assert img[..., :3].std() > 0.05  # something is drawn, not a blank canvas
        assert f"wrote {p}" in out.err
    assert sorted(x.name for x in (run / "plots").iterdir()) == ["training.png", "validation.png"]

    s = result["summary"]
    assert s["final_loss"] == 0.6125 and s["best_valid_mrr"] == 0.625
    assert s["best_valid_step"] == 8 and s["steps"] == 12 and s["epochs"] == 3
    assert s["final_lr"] == 1e-3 and s["train_seconds"] == 6.0
    assert s["test"] == {"mrr": 0.58, "hits@10": 0.875}
    table = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.err.splitlines()
        if not line.startswith("wrote ")
    )  # fmt: skip
    assert float(table["final loss"]) == pytest.approx(0.6125, abs=5e-5)
    assert float(table["best valid MRR"]) == 0.625 and table["at step"] == "8"
    assert float(table["test mrr"]) == 0.58


def test_report_without_validation_writes_the_training_plot_only(tmp_path, capsys):
    run = tmp_path / "run"
    write_metrics(run, [r for r in fixture_rows() if r["kind"] == "train"][:3])
    assert run_cli(_main, [str(run)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [Path(p).name for p in result["plots"]] == ["training.png"]
    assert result["summary"]["best_valid_mrr"] is None and result["summary"]["final_loss"] == 1.1


@pytest.mark.integration
@pytest.mark.parametrize("case", ["no_csv", "missing_dir", "bad_cell"])
def test_report_errors_are_one_line_exit_2(tmp_path, case, capsys):
    run = tmp_path / "run"
    if case == "no_csv":
        run.mkdir()
    elif case == "bad_cell":
        rows = fixture_rows()
        rows[2]["loss"] = "abc"
        write_metrics(run, rows)
    if case == "no_csv":  # once through the real entry point
        proc = subprocess.run(
            [sys.executable, "-m", "cmpnn_dist.report", str(run)], capture_output=True, text=True
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        rc = run_cli(_main, [str(run)])
        out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    expected = {
        "no_csv": f"{run} has no metrics.csv",
        "missing_dir": f"{run} does not exist",
        "bad_cell": "metrics.csv: line 4: loss='abc' is not a number",
    }[case]
    assert expected in lines[0]
    assert not (run / "plots").exists()


def _one_validation_rows() -> list[dict]:
    """A run stopped by its step budget at step 150 of a 205-step epoch: one validation, one
    test row, ``epochs_done`` on the training rows as the trainer writes them."""
    rows = [
        {"kind": "train", "step": s, "epoch": 0, "loss": 1.0 / s, "lr": 5e-3, "time_s": 0.1 * s,
         "epochs_done": round(s / 205, 4)}
        for s in range(1, 151)
    ]  # fmt: skip
    rows.append({"kind": "valid", "step": 150, "epoch": 0, "valid_mrr": 0.42,
                 "valid_hits@1": 0.35, "valid_hits@10": 0.56})  # fmt: skip
    rows.append({"kind": "test", "step": 150, "epoch": 0, "test_mrr": 0.46, "test_hits@10": 0.57})
    return rows


def test_one_validation_point_summary_and_axis(tmp_path, capsys):
    """The summary says the fraction of an epoch trained (150 / 205 = 0.73, 0.7317 on the
    rows); the lone validation point sits on an axis from step 0 to the last step."""
    import matplotlib.pyplot as plt

    from cmpnn_dist.cli.report import read_metrics, validation_figure

    run = tmp_path / "run"
    rows = _one_validation_rows()
    run.mkdir()
    with open(run / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, [*COLUMNS, "valid_hits@1", "epochs_done"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert run_cli(_main, [str(run)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out.strip().splitlines()[-1])["summary"]["epochs"] == 0.7317
    table = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.err.splitlines()
                 if not line.startswith("wrote "))  # fmt: skip
    assert table["trained"] == "0.73 epoch" and table["steps"] == "150"

    fig = validation_figure(read_metrics(run / "metrics.csv"))
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    assert lo == 0 and 150 < hi <= 160  # not a window of +-0.06 steps around 150
    plt.close("all")


def test_summary_epochs_without_epochs_done_column(tmp_path, capsys):
    """Older metrics.csv files (no ``epochs_done``): steps / steps per epoch once the first
    epoch is over (the fixture: 12 steps of 4 = 3 epochs); unknown while still in it."""
    from cmpnn_dist.cli.report import epochs_text, summarize

    rows = {"train": [r for r in fixture_rows() if r["kind"] == "train"], "valid": [], "test": []}
    assert summarize(rows)["epochs"] == 3.0 and epochs_text(3.0) == "3 epochs"
    rows["train"] = rows["train"][:6]
    assert summarize(rows)["epochs"] == 1.5 and epochs_text(1.5) == "1.5 epochs"
    rows["train"] = rows["train"][:3]
    assert summarize(rows)["epochs"] is None
    assert epochs_text(1.0) == "1 epoch"


@pytest.mark.parametrize("rows", ["fixture", "one_validation"])
def test_the_legend_hides_no_test_marker(rows):
    """Every test star lies inside the axes and outside the legend (display coordinates,
    the star's own size around its centre); the legend names the stars."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from cmpnn_dist.cli.report import validation_figure

    data = fixture_rows() if rows == "fixture" else _one_validation_rows()
    by_kind: dict = {"train": [], "valid": [], "test": []}
    for r in data:
        by_kind[r["kind"]].append(r)
    fig = validation_figure(by_kind)
    assert isinstance(fig, Figure)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    frame = ax.get_window_extent(renderer)
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert len(stars) == len(by_kind["test"][-1]) - 3  # one per test metric
    for line in stars:
        ((x, y),) = ax.transData.transform(line.get_xydata())
        r = line.get_markersize() * fig.dpi / 72 / 2
        assert frame.x0 <= x - r and x + r <= frame.x1 and frame.y0 <= y - r and y + r <= frame.y1
        assert x + r < legend.x0 or x - r > legend.x1 or y + r < legend.y0 or y - r > legend.y1
    assert "test (final)" in [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close("all")
