"""Readers on what a real run wrote (the session's tiny run, tests/helpers/real_run.py).

``report``, ``evaluate`` and ``predict`` read the folder of a run trained for real, so a new
column or file in the run folder is seen by these tests before a user sees it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli

FULL = "best.best-weights.all-pessimistic.all-queries"  # evaluate's folder for checkpoints/best


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_report_reads_a_real_run(real_run, capsys):
    from cmpnn_dist.cli.report import _main

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
    from cmpnn_dist.cli.evaluate import _main

    best = Path(real_run["run_dir"]) / "checkpoints" / "best"
    assert (best / "manifest.json").is_file()
    assert run_cli(_main, [f"ckpt={best}"]) == 0
    out = _last_json(capsys.readouterr().out)
    assert out["valid"]["mrr"] == pytest.approx(real_run["valid"]["mrr"], abs=1e-6)
    assert out["test"]["mrr"] == pytest.approx(real_run["test"]["mrr"], abs=1e-6)
    folder = Path(real_run["run_dir"]) / "evaluations" / FULL
    assert out["evaluation_dir"] == str(folder) and (folder / "results.json").is_file()


def test_predict_loads_a_real_run(real_run, capsys):
    from cmpnn_dist.cli.predict import _main
    from cmpnn_dist.predict import Predictor

    p = Predictor.from_checkpoint(real_run["run_dir"], device="cpu")
    frame = p.predict(head="A::0", relation="t0", topk=3)
    assert len(frame) == 3 and list(frame["rank"]) == [1, 2, 3]
    args = [f"ckpt={real_run['run_dir']}", "head=A::0", "relation=t0", "topk=2"]
    assert run_cli(_main, args) == 0
    assert "A::0" in capsys.readouterr().out


def test_a_file_uri_root_writes_the_same_run_folder_as_a_local_root(real_run, real_run_uri):
    """storage_root=file:///abs: nothing under the working dir (no ./file:/...), the dataset
    and the run under the URI's folder, the same files as a local root, the same numbers."""
    assert list(Path(real_run_uri["cwd"]).iterdir()) == []
    assert real_run_uri["run_dir"] == real_run_uri["root"] + "/runs/tiny"
    base = Path(real_run_uri["base"])
    assert (base / "datasets" / "rk300" / "manifest.json").is_file()
    assert real_run_uri["files"] == real_run["files"]
    assert {"metrics.csv", "results.json", "ranks_test_all.parquet"} <= real_run["files"]
    assert {"tensorboard/events", "checkpoints/best/manifest.json"} <= real_run["files"]
    assert real_run_uri["test"]["mrr"] == real_run["test"]["mrr"]  # deterministic tiny run


def test_readers_take_a_file_uri(real_run_uri, capsys):
    from cmpnn_dist.cli.evaluate import _main as evaluate_main
    from cmpnn_dist.cli.report import _main as report_main
    from cmpnn_dist.predict import Predictor

    run = real_run_uri["run_dir"]
    assert run_cli(report_main, [run]) == 0
    assert _last_json(capsys.readouterr().out)["summary"]["steps"] == 20
    assert run_cli(evaluate_main, [f"ckpt={run}/checkpoints/best"]) == 0
    out = _last_json(capsys.readouterr().out)
    assert out["test"]["mrr"] == pytest.approx(real_run_uri["test"]["mrr"], abs=1e-6)
    assert out["run_dir"] == run
    p = Predictor.from_checkpoint(run, device="cpu")
    assert len(p.predict(head="A::0", relation="t0", topk=2)) == 2
    local = Path(real_run_uri["base"]) / "runs" / "tiny"
    assert (local / "plots" / "validation.png").is_file()
    assert (local / "evaluations" / FULL / "results.json").is_file()
    assert out["evaluation_dir"] == f"{run}/evaluations/{FULL}"


def test_predict_on_an_inductive_run_points_to_graph_test(tmp_path, capsys):
    """A test-graph entity asked on the training graph of an inductive model: one line that
    says graph=test (not a 'closest' training entity); with graph=test it is answered."""
    from cmpnn_dist.cli.predict import _main
    from cmpnn_dist.predict import Predictor
    from tests.helpers.real_run import train_tiny

    extra = ["data.name=rki", "data.source=synthetic:rule_kg_inductive"]
    out = train_tiny(str(tmp_path), "ind", extra)
    p = Predictor.from_checkpoint(out["run_dir"], device="cpu", graph="test")
    train_names = set(Predictor.from_checkpoint(out["run_dir"], device="cpu").entities.names)
    name = next(n for n in p.entities.names if n not in train_names)
    args = [f"ckpt={out['run_dir']}", f"head={name}", "relation=t0", "topk=2"]
    capsys.readouterr()
    assert run_cli(_main, args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: unknown entity {name!r}; it is an entity of the test graph")
    assert "graph=test" in err and "closest" not in err
    assert run_cli(_main, [*args, "graph=test"]) == 0
