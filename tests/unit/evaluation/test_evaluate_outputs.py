"""``evaluate`` writes beside a run's own files, never into them, and scores what it names.

References: the run folder as training left it (every file's bytes), and the validation rows
training itself wrote to ``metrics.csv`` for the weights of a given step.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.cli.evaluate import _main as evaluate_main
from tests.helpers.real_run import train_tiny


def _digests(run: Path) -> dict[str, str]:
    """sha256 of every file of a run folder outside ``evaluations/``."""
    return {
        p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run.rglob("*")
        if p.is_file() and p.relative_to(run).parts[0] != "evaluations"
    }


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_an_evaluation_with_a_budget_leaves_the_runs_ranks_and_results(real_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(real_run["run_dir"], run, ignore=shutil.ignore_patterns("evaluations"))
    before = _digests(run)
    trained_rows = pq.read_table(run / "ranks_test_all.parquet").num_rows
    assert trained_rows == json.loads((run / "results.json").read_text())["test"]["num_queries"]

    assert run_cli(evaluate_main, [f"ckpt={run}", "eval.max_queries=5"]) == 0
    small = _last_json(capsys.readouterr().out)
    assert run_cli(evaluate_main, [f"ckpt={run}"]) == 0
    full = _last_json(capsys.readouterr().out)

    assert _digests(run) == before  # results.json, the training's ranks, checkpoints: as written
    folders = sorted(p.name for p in (run / "evaluations").iterdir())
    assert folders == [
        "step_00000020.best-weights.all-pessimistic.5-queries",
        "step_00000020.best-weights.all-pessimistic.all-queries",
    ]
    five = run / "evaluations" / folders[0]
    assert small["evaluation_dir"] == str(five)
    assert pq.read_table(five / "ranks_test_all.parquet").num_rows == 10  # 5 x both directions
    saved = json.loads((five / "results.json").read_text())
    assert saved["test"]["num_queries"] == 10 and saved["overrides"] == ["eval.max_queries=5"]
    assert full["test"]["num_queries"] == trained_rows
    assert full["test"]["mrr"] == pytest.approx(real_run["test"]["mrr"], abs=1e-6)


def _valid_rows(run: Path) -> dict[int, float]:
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): float(r["valid_mrr"]) for r in rows if r["kind"] == "valid"}


def test_a_step_checkpoint_scores_that_steps_weights(tmp_path, capfd):
    """10 steps (validated: best = step 10), then 30 (checkpoints at 20, not validated, and
    30, validated).  ``ckpt=.../step_00000030`` ranks step 30's weights: the valid MRR
    training logged at step 30; ``ckpt=.../step_00000020`` says it ranks step 20's weights,
    and with ``weights=best`` the best weights it carries, step 10's: training's step-10 MRR."""
    root = tmp_path / "storage"
    train_tiny(str(root), "r", ["train.max_steps=10"])
    train_tiny(str(root), "r", ["train.max_steps=30"])
    run = root / "runs" / "r"
    valid = _valid_rows(run)
    assert sorted(valid) == [10, 30]
    ckpts = run / "checkpoints"
    capfd.readouterr()

    assert run_cli(evaluate_main, [f"ckpt={ckpts}/step_00000030"]) == 0
    out = capfd.readouterr()
    got = _last_json(out.out)
    assert f"evaluated the weights of step 30 ({ckpts}/step_00000030)" in out.err
    assert got["weights"] == "last" and got["weights_step"] == 30
    assert got["valid"]["mrr"] == pytest.approx(valid[30], abs=1e-9)

    assert run_cli(evaluate_main, [f"ckpt={ckpts}/step_00000020", "weights=best"]) == 0
    out = capfd.readouterr()
    got = _last_json(out.out)
    assert f"evaluated the best weights (step 10, by valid MRR) of {ckpts}/step_00000020" in out.err
    assert got["valid"]["mrr"] == pytest.approx(valid[10], abs=1e-9)
    assert got["evaluation_dir"].endswith("step_00000020.best-weights.all-pessimistic.all-queries")

    assert run_cli(evaluate_main, [f"ckpt={ckpts}/step_00000020"]) == 0
    out = capfd.readouterr()
    assert f"evaluated the weights of step 20 ({ckpts}/step_00000020)" in out.err
    assert _last_json(out.out)["weights_step"] == 20


@pytest.mark.parametrize(
    "target", ["ranks_test_all.parquet", "metrics.csv", "checkpoints/best/x.csv", "plots/a.png"]
)
def test_predict_refuses_to_write_over_a_runs_own_files(real_run, tmp_path, capsys, target):
    from cmpnn_dist.cli.predict import _main as predict_main

    run = tmp_path / "run"
    shutil.copytree(real_run["run_dir"], run, ignore=shutil.ignore_patterns("evaluations"))
    (run / "plots").mkdir(exist_ok=True)
    before = _digests(run)
    key = "draw" if target.endswith(".png") else "out"
    args = [f"ckpt={run}", "head=A::0", "relation=t0", f"{key}={run / target}"]
    assert run_cli(predict_main, args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {key}={run / target} would overwrite")
    assert _digests(run) == before
    beside = tmp_path / "scores.csv"  # beside the run: written
    assert run_cli(predict_main, [*args[:3], f"out={beside}"]) == 0 and beside.is_file()
