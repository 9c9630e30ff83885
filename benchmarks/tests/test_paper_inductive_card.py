"""The sweeps' cells on a lent GPU (``benchmarks/accuracy/paper_inductive_card.py``): each cell runs
as its own command there (no Ray), is stopped with SIGINT, packed into parts small enough for the
device tool, unpacked here and continued or archived.  Checked on real tiny runs (on the CPU: what
travels is the run folder, whichever device wrote it): a run stopped on "the card" goes on here and
ends exactly as an uninterrupted run; a run that finished on "the card" is archived here from its
packed files; ``pieces.json`` names the card's steps."""

from __future__ import annotations

import json
import signal
import tarfile
from pathlib import Path

import pytest

from benchmarks.accuracy.paper_inductive import (
    PIECE,
    _step,
    run_names,
    save,
    start_piece,
    sweep_command,
)
from benchmarks.accuracy.paper_inductive_card import cell_command, pack, unpack
from tests.helpers.real_run import history, interrupt_tiny, train_tiny

CARD = "Test Card (GPU)"


def _packed_names(parts: list[Path], tmp: Path) -> list[str]:
    joined = tmp / "joined.tgz"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        return sorted(tar.getnames())


@pytest.mark.integration
def test_a_run_stopped_on_the_card_goes_on_here_bit_identical(tmp_path):
    ref = tmp_path / "ref"
    train_tiny(str(ref))
    card = tmp_path / "card"
    start_piece(card, runs=["tiny"], device=CARD)
    proc = interrupt_tiny(tmp_path, str(card), signal.SIGINT, 15)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert _step(card / "runs" / "tiny") == 15  # SIGINT inside step 15: it ends, checkpointed

    parts = pack(card, tmp_path / "out", part=40_000)
    assert len(parts) > 1 and all(p.stat().st_size <= 40_000 for p in parts)
    names = _packed_names(parts, tmp_path)
    # the piece record and the newest checkpoint travel; older checkpoints and TensorBoard not
    assert PIECE in names and "runs/tiny/checkpoints/step_00000015/state.pt" in names
    assert not any("step_00000010" in n or "tensorboard" in n for n in names)

    here = tmp_path / "here"
    assert unpack(here, parts) == ["tiny"]
    assert unpack(here, parts) == []  # the store already holds that step
    start_piece(here, runs=["tiny"])
    out = train_tiny(str(here))
    assert out["resumed_from_step"] == 15
    assert history(here / "runs" / "tiny") == history(ref / "runs" / "tiny")
    done = json.loads((here / "runs" / "tiny" / "results.json").read_text())
    assert done["test"] == json.loads((ref / "runs" / "tiny" / "results.json").read_text())["test"]

    archive = tmp_path / "archive"
    assert save(here, archive, runs=["tiny"])["finished"] == ["tiny"]
    pieces = json.loads((archive / "tiny" / "pieces.json").read_text())
    assert [(p.get("device"), p["from_step"], p["until_step"]) for p in pieces] == [
        (CARD, -1, 15), (None, 15, 20)]  # fmt: skip


def test_a_run_finished_on_the_card_is_archived_here(tmp_path):
    card = tmp_path / "card"
    start_piece(card, runs=["tiny"], device=CARD)
    done = train_tiny(str(card))
    parts = pack(card, tmp_path / "out")
    names = _packed_names(parts, tmp_path)
    assert "runs/tiny/results.json" in names and "runs/tiny/ranks_test_all.parquet" in names
    assert "runs/tiny/checkpoints/best/state.pt" in names
    assert "runs/tiny/checkpoints/step_00000020/state.pt" in names  # what ``save`` reads

    here = tmp_path / "here"
    assert unpack(here, parts) == ["tiny"]
    start_piece(here, runs=["tiny"])  # a later piece here: it leaves the finished cell alone
    assert "tiny" not in json.loads((here / PIECE).read_text())[-1]["from_step"]
    # the metrics file travels without its training rows: ``save`` keeps only the others
    rows = (here / "runs" / "tiny" / "metrics.csv").read_text().splitlines()[1:]
    assert rows and not any(r.startswith("train,") for r in rows)

    archive = tmp_path / "archive"
    assert save(here, archive, runs=["tiny"])["finished"] == ["tiny"]
    facts = json.loads((archive / "tiny" / "facts.json").read_text())
    for k in ("mrr", "hits@10", "hits@10_50"):  # a transductive graph: the same filter
        assert abs(facts[k] - done["test"][k]) < 1e-9, k
    pieces = json.loads((archive / "tiny" / "pieces.json").read_text())
    assert [(p.get("device"), p["from_step"], p["until_step"]) for p in pieces] == [
        (CARD, -1, 20)]  # fmt: skip


def test_a_cells_command_composes_the_config_its_sweep_trial_does(tmp_path):
    from cmpnn_dist.cli.common import compose_config, split_args
    from cmpnn_dist.runs.sweep import expand

    for run in ("graIL8_prior/data=wn18rr_ind_v3", "graIL8_seeds/data=fb237_ind_v2,train.seed=2"):
        assert run in run_names()
        sweep = run.split("/")[0]
        # the sweep's own path: the CLI splits conf= / sweep_name=, expands the rest, and
        # each trial adds its folder (cmpnn_dist/cli/train.py sweep, distributed/tune_trials.py)
        special, overrides = split_args(sweep_command(sweep, tmp_path)[4:], ["conf", "sweep_name"])
        fixed, cells = expand(overrides)
        (cell,) = [c for c in cells if f"{sweep}/{c.cell_id}" == run]
        trial = [*fixed, *cell.overrides, f"storage_root='{tmp_path}'", f"run_name='{run}'",
                 "train.progress=false", "resume=true"]  # fmt: skip
        cmd = cell_command(run, tmp_path)
        assert cmd[1:3] == ["-m", "cmpnn_dist.train"] and cmd[3] == f"conf={special['conf']}"
        mine = compose_config(special["conf"], cmd[4:])
        assert mine == compose_config(special["conf"], trial)
        assert mine.run_name == run and Path(mine.storage_root) == tmp_path
