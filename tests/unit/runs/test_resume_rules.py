"""What a resumed run must do: validate and publish ``best`` even when it resumes at its last
step, refuse a resume that changes how the run trains (one error naming the keys), accept a
longer run with one line, and restore a ``best`` lost by a kill before it was updated.

References: an uninterrupted run of the same length (bit-identical in deterministic CPU mode),
and the checkpoint manifests themselves.
"""

from __future__ import annotations

import shutil

import pytest

from cmpnn_dist.runs.checkpoint import CheckpointError, read_manifest
from cmpnn_dist.training.loop import fit
from tests.helpers.training import Crash, assert_same_weights, crash_at, rule_kg, small_cfg


@pytest.fixture(scope="module")
def data():
    return rule_kg(32)


def test_a_run_resumed_at_its_last_step_validates_and_publishes_best(data, tmp_path, capsys):
    """Interrupted after its mid-epoch step-10 checkpoint, rerun with max_steps=10: the run
    validates step 10 and writes best, exactly as a run of 10 steps does."""
    reference = fit(small_cfg(max_steps=10), data, run_dir=tmp_path / "ref")
    run = tmp_path / "run"
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=crash_at(12))
    assert read_manifest(run / "checkpoints" / "step_00000010")["meta"] == {}  # not validated
    capsys.readouterr()
    res = fit(small_cfg(max_steps=10), data, run_dir=run)
    err = capsys.readouterr().err
    assert "train.max_steps None -> 10: the run now ends at step 10 instead of" in err
    assert res.resumed_from_step == 10 and res.step == 10
    assert res.best_valid == reference.best_valid and res.best_valid["mrr"] > 0
    assert res.test == reference.test
    assert_same_weights(res.model.state_dict(), reference.model.state_dict())
    best = read_manifest(run / "checkpoints" / "best")
    assert best["step"] == 10 and best["meta"]["score"] == reference.best_valid["mrr"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"seed": 1}, ["train.seed: 0 in the checkpoint, 1 now"]),
        ({"lr": 0.01}, ["train.lr: 0.005 in the checkpoint, 0.01 now"]),
        ({"lr": 0.01, "batch_size": 4}, ["train.lr: 0.005", "train.batch_size: 8"]),
        ({"max_steps": 3}, ["the run would end at step 3, before the checkpoint's step 5"]),
        ({"lr_schedule": "cosine"}, ["train.lr_schedule: 'constant' in the checkpoint"]),
    ],
)
def test_a_resume_that_changes_the_run_is_one_error_naming_the_keys(data, tmp_path, change, named):
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=tmp_path, on_step=crash_at(6))
    with pytest.raises(CheckpointError) as info:
        fit(small_cfg(**change), data, run_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    for part in named:
        assert part in message
    fit(small_cfg(max_steps=8), data, run_dir=tmp_path)  # the checkpoint is still usable


def test_extending_a_decaying_schedule_is_refused_a_constant_one_accepted(data, tmp_path):
    fit(small_cfg(max_steps=5, lr_schedule="linear"), data, run_dir=tmp_path / "a")
    with pytest.raises(CheckpointError, match="would stretch the learning-rate schedule"):
        fit(small_cfg(max_steps=8, lr_schedule="linear"), data, run_dir=tmp_path / "a")
    fit(small_cfg(max_steps=5), data, run_dir=tmp_path / "b")
    assert fit(small_cfg(max_steps=8), data, run_dir=tmp_path / "b").step == 8


def test_best_lost_between_publishing_and_updating_it_is_restored(data, tmp_path):
    """A kill after step 10's checkpoint was published but before best was updated (here:
    best removed by hand) and a rerun at the same length: best is there again, the step-10
    checkpoint's copy."""
    first = fit(small_cfg(max_steps=10), data, run_dir=tmp_path)
    shutil.rmtree(tmp_path / "checkpoints" / "best")
    res = fit(small_cfg(max_steps=10), data, run_dir=tmp_path)
    assert res.resumed_from_step == 10 and res.best_valid == first.best_valid
    best = read_manifest(tmp_path / "checkpoints" / "best", verify_checksums=True)
    assert best["step"] == 10 and best["meta"]["score"] == first.best_valid["mrr"]


def test_without_validation_best_is_the_last_checkpoint(data, tmp_path, capsys):
    cfg = small_cfg(max_steps=7)
    cfg.eval.splits = ["test"]
    res = fit(cfg, data, run_dir=tmp_path)
    err = capsys.readouterr().err
    assert err.count("no validation (eval.splits has no valid): checkpoints/best holds") == 1
    best = read_manifest(tmp_path / "checkpoints" / "best", verify_checksums=True)
    assert best["step"] == 7 and best["meta"] == {"best_is_last": True}
    assert res.best_valid == {} and res.test
