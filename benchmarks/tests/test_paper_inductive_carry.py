"""The eight-split sweep runs in pieces on different machines:
``benchmarks/accuracy/paper_inductive.py save`` archives an unfinished run's newest checkpoint (and
a finished run's results), and ``restore`` puts it into a fresh storage root where the same command
resumes it.  Checked on a real run SIGKILLed inside a step: resumed elsewhere, it ends exactly as an
uninterrupted run."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from benchmarks.accuracy import paper_inductive
from benchmarks.accuracy.paper_inductive import (
    BY_COST,
    PIECE,
    plan,
    restore,
    run_names,
    save,
    start_piece,
    sweep_overrides,
)
from cmpnn_dist.evaluation.metrics import ranking_metrics
from tests.helpers.real_run import history, interrupt_tiny, train_tiny


def _best_weights(run: Path) -> dict[str, torch.Tensor]:
    """The best weights the run's newest checkpoint holds (what evaluate / predict load)."""
    from cmpnn_dist.runs.checkpoint import load_checkpoint
    from cmpnn_dist.runs.checkpoint_store import CheckpointStore

    return load_checkpoint(CheckpointStore(run).find_latest().path)["best"]["state"]


@pytest.mark.integration
def test_a_killed_run_travels_through_the_archive_and_resumes_bit_identical(tmp_path):
    ref = tmp_path / "ref"
    train_tiny(str(ref))
    killed = tmp_path / "machine_a"
    start_piece(killed, runs=["tiny"])  # what ``run`` records before its sweeps
    proc = interrupt_tiny(tmp_path, str(killed), signal.SIGKILL, 15)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

    archive = tmp_path / "archive"
    assert save(killed, archive, runs=["tiny"]) == {
        "finished": [], "in progress": ["tiny"], "ranks added": []}  # fmt: skip
    kept = sorted(p.name for p in (archive / "tiny" / "checkpoints").iterdir())
    assert kept == ["step_00000010"]  # the newest checkpoint holds the best weights so far
    # nothing newer to save: the archive is left as it is
    assert save(killed, archive, runs=["tiny"]) == {
        "finished": [], "in progress": [], "ranks added": []}  # fmt: skip

    fresh = tmp_path / "machine_b"
    assert restore(fresh, archive, runs=["tiny"]) == ["tiny"]
    assert restore(fresh, archive, runs=["tiny"]) == []  # the store already holds that step
    start_piece(fresh, runs=["tiny"])  # a piece that ends before it trains the cell
    time.sleep(1.1)  # (pieces are told apart by their start, to the second)
    start_piece(fresh, runs=["tiny"])
    out = train_tiny(str(fresh))  # the same command, on the other machine
    assert out["resumed_from_step"] == 10  # continued, not started again from step 0
    assert history(fresh / "runs" / "tiny") == history(ref / "runs" / "tiny")
    done = json.loads((fresh / "runs" / "tiny" / "results.json").read_text())
    want = json.loads((ref / "runs" / "tiny" / "results.json").read_text())
    assert done["test"] == want["test"] and done["valid"] == want["valid"]
    a, b = _best_weights(fresh / "runs" / "tiny"), _best_weights(ref / "runs" / "tiny")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # finished: results, the log and the paper's-filter metrics replace the checkpoints
    assert save(fresh, archive, runs=["tiny"]) == {
        "finished": ["tiny"], "in progress": [], "ranks added": []}  # fmt: skip
    cell = archive / "tiny"
    files = sorted(p.name for p in cell.iterdir())
    assert files == ["facts.json", "metrics.csv", "pieces.json", "ranks_test_all.parquet",
                     "ranks_test_filter_facts.parquet", "results.json"]  # fmt: skip
    pieces = json.loads((cell / "pieces.json").read_text())  # where each piece ran, to which step
    # machine_a's piece, then the second piece of machine_b: the first one moved nothing
    assert [(p["from_step"], p["until_step"]) for p in pieces] == [(-1, 10), (10, done["step"])]
    assert [p["store"] for p in pieces] == [str(killed), str(fresh)]
    assert pieces[1]["started_utc"] == json.loads((fresh / PIECE).read_text())[1]["started_utc"]
    assert all(p["cpu"] and p["commit"] for p in pieces)
    facts = json.loads((cell / "facts.json").read_text())
    # a transductive graph is filtered with every fact under either filter: the re-scored best
    # weights give the run's own test figures
    for k in ("mrr", "hits@10", "hits@10_50"):
        assert abs(facts[k] - done["test"][k]) < 1e-9, k
    # the archived ranks score to the archived figures under the run's own rule
    ranks = pq.read_table(cell / "ranks_test_filter_facts.parquet").to_pandas()
    assert len(ranks) == facts["num_queries"]
    rescored = ranking_metrics(
        torch.tensor(ranks["rank"].to_numpy()), torch.tensor(ranks["candidates"].to_numpy())
    )  # the paper's rule
    for k in ("mrr", "hits@10", "hits@10_50"):
        assert abs(rescored[k] - facts[k]) < 1e-12, k
    assert pq.read_table(cell / "ranks_test_all.parquet").equals(
        pq.read_table(fresh / "runs" / "tiny" / "ranks_test_all.parquet"))  # fmt: skip

    # a cell archived without its ranks gets them from the store, scored to the same figures
    for name in ("ranks_test_all.parquet", "ranks_test_filter_facts.parquet"):
        (cell / name).unlink()
    assert save(fresh, archive, runs=["tiny"]) == {
        "finished": [], "in progress": [], "ranks added": ["tiny"]}  # fmt: skip
    assert pq.read_table(cell / "ranks_test_filter_facts.parquet").to_pandas().equals(ranks)
    assert restore(tmp_path / "machine_c", archive, runs=["tiny"]) == ["tiny"]


def test_the_archive_names_every_cell_of_the_three_sweeps():
    names = run_names()
    assert len(names) == len(set(names)) == 8 + 8 + 8
    assert "graIL8_seeds/data=wn18rr_ind_v2,train.seed=2" in names
    assert "graIL8_prior/data=wn18rr_ind_v3" in names


def test_the_staged_plan_runs_the_cheap_splits_cells_first():
    """``run`` runs the sweeps restricted to the cheap splits before the dear ones: every cell
    of the three sweeps comes up under its own name, the cheap splits' cells (seeds and prior
    included) in a stage before any cell of the dearest split."""
    from cmpnn_dist.runs.sweep import expand

    seen, stage_of = [], {}
    for i, (name, only) in enumerate(plan()):
        _, grid = expand(sweep_overrides(name, Path("STORE"), only))
        for cell in grid:
            seen.append(f"{name}/{cell.cell_id}")
            stage_of.setdefault(seen[-1], i)  # later stages list it again: it is finished
    assert sorted(set(seen)) == sorted(run_names())  # every cell, named as the whole sweep names it
    first_dear = min(stage_of[n] for n in run_names() if "fb237_ind_v4" in n)
    cheap = [n for n in run_names() if any(f"data={s}" in n for s in BY_COST[:4])]
    assert all(stage_of[n] < first_dear for n in cheap)  # seeds and prior cells included


@pytest.mark.integration
def test_a_sweep_with_failed_cells_does_not_hold_up_the_later_ones(tmp_path, monkeypatch):
    """``run`` goes on past a sweep whose cells failed (the product's exit status 1) and ends
    with status 1 naming it; an interrupted sweep (130) ends the piece there.  Each sweep is a
    real child process that logs its name and exits with the status given for it."""
    log = tmp_path / "started.txt"

    def child(status: dict[str, int]):
        def command(name: str, storage: Path, only: list[str] | None = None) -> list[str]:
            code = f"open({str(log)!r}, 'a').write({name!r} + ' '); "
            code += f"raise SystemExit({status.get(name, 0)})"
            return [sys.executable, "-c", code]

        return command

    monkeypatch.setattr(paper_inductive, "restore", lambda storage: [])
    store = ["run", "--storage", str(tmp_path / "store")]
    names = [name for name, _ in plan()]  # nothing finished: every step of the plan runs
    monkeypatch.setattr(paper_inductive, "sweep_command", child({"graIL8_seeds": 1}))
    assert paper_inductive.main(store) == 1
    assert log.read_text().split() == names
    log.unlink()
    monkeypatch.setattr(paper_inductive, "sweep_command", child({"graIL8_seeds": 130}))
    assert paper_inductive.main(store) == 130
    assert log.read_text().split() == names[: names.index("graIL8_seeds") + 1]


def test_a_cell_without_a_piece_record_names_the_code_it_was_given_or_none(tmp_path):
    """A store whose cells were trained by hand (the sweep's own command, not ``run``) has no
    piece record: the piece names the ``--commit`` given, else says the code is unknown,
    never the commit of the checkout that happens to run ``save``."""
    (tmp_path / "runs" / "cell").mkdir(parents=True)
    given = paper_inductive.pieces_of(tmp_path, "cell", 40, "the-given-code")
    assert [(p["commit"], p["from_step"], p["until_step"]) for p in given] == [
        ("the-given-code", None, 40)
    ]
    assert paper_inductive.pieces_of(tmp_path, "cell", 40)[0]["commit"] == (
        paper_inductive.UNKNOWN_CODE
    )
    start_piece(tmp_path, ["cell"])  # with a record, the record's code
    recorded = json.loads((tmp_path / PIECE).read_text())[0]["commit"]
    assert (
        paper_inductive.pieces_of(tmp_path, "cell", 40, "the-given-code")[0]["commit"] == recorded
    )
