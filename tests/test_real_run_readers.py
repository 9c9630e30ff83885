"""Readers on what a real run wrote (the session's tiny run, tests/_real_run.py).

``report``, ``evaluate`` and ``predict`` read the folder of a run trained for real, so a new
column or file in the run folder is seen by these tests before a user sees it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cmpnn_dist.cli import run_cli


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_report_reads_a_real_run(real_run, capsys):
    from cmpnn_dist.report import _main

    run = Path(real_run["run_dir"])
    assert run_cli(_main, [str(run)]) == 0
    result = _last_json(capsys.readouterr().out)
    assert [Path(p).name for p in result["plots"]] == ["training.png", "validation.png"]
    # the summary equals the run's own summary and its metrics.csv, read here with csv
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert any(k.endswith("_protocol") for k in rows[0])  # the text columns are there
    s = result["summary"]
    assert s["steps"] == 20
    assert s["best_valid_mrr"] == pytest.approx(real_run["valid"]["mrr"])
    assert s["test"]["mrr"] == pytest.approx(real_run["test"]["mrr"])
    assert s["test"]["protocol"] == "all"
    assert s["final_loss"] == pytest.approx(
        float([r for r in rows if r["kind"] == "train"][-1]["loss"])
    )


def test_evaluate_best_of_a_real_run_equals_its_training_numbers(real_run, capsys):
    from cmpnn_dist.evaluate import _main

    best = Path(real_run["run_dir"]) / "checkpoints" / "best"
    assert (best / "manifest.json").is_file()
    assert run_cli(_main, [f"ckpt={best}"]) == 0
    out = _last_json(capsys.readouterr().out)
    assert out["valid"]["mrr"] == pytest.approx(real_run["valid"]["mrr"], abs=1e-6)
    assert out["test"]["mrr"] == pytest.approx(real_run["test"]["mrr"], abs=1e-6)
    assert (Path(real_run["run_dir"]) / "eval_all.json").is_file()


def test_predict_loads_a_real_run(real_run, capsys):
    from cmpnn_dist.predict import Predictor
    from cmpnn_dist.predict.__main__ import _main

    p = Predictor.from_checkpoint(real_run["run_dir"], device="cpu")
    frame = p.predict(head="A::0", relation="t0", topk=3)
    assert len(frame) == 3 and list(frame["rank"]) == [1, 2, 3]
    args = [f"ckpt={real_run['run_dir']}", "head=A::0", "relation=t0", "topk=2"]
    assert run_cli(_main, args) == 0
    assert "A::0" in capsys.readouterr().out
