"""Atomic checksummed checkpoints: round trip, torn / corrupt detection, pruning."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from cmpnn_dist.training.checkpoint import (
    CheckpointError,
    find_latest_valid,
    load_checkpoint,
    prune,
    save_checkpoint,
)


def _state(step: int) -> dict:
    return {"step": step, "epoch": step // 10, "w": torch.arange(100.0) * step, "hist": [1, 2.5]}


def test_round_trip_and_manifest(tmp_path):
    path = save_checkpoint(tmp_path / "step_00000007", _state(7), meta={"score": 0.5})
    assert path == tmp_path / "step_00000007"
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["step"] == 7 and manifest["epoch"] == 0 and manifest["meta"] == {"score": 0.5}
    assert manifest["files"]["state.pt"]["size"] == (path / "state.pt").stat().st_size
    state = load_checkpoint(path)
    assert torch.equal(state["w"], _state(7)["w"]) and state["hist"] == [1, 2.5]
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000007"]  # no temp dirs left
    # overwrite in place
    save_checkpoint(path, _state(8))
    assert load_checkpoint(path)["step"] == 8


def test_truncated_and_missing_manifest_are_skipped_with_warning(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path / f"step_{step:08d}", _state(step))
    assert find_latest_valid(tmp_path) == tmp_path / "step_00000003"
    state_file = tmp_path / "step_00000003" / "state.pt"
    data = state_file.read_bytes()
    state_file.write_bytes(data[: len(data) // 2])  # truncated
    (tmp_path / "step_00000002" / "manifest.json").unlink()  # manifest missing
    with pytest.warns(UserWarning) as record:
        assert find_latest_valid(tmp_path) == tmp_path / "step_00000001"
    messages = [str(w.message) for w in record]
    assert any("step_00000003" in m and "truncated" in m for m in messages)
    assert any("step_00000002" in m and "manifest missing" in m for m in messages)
    with pytest.raises(CheckpointError, match="state.pt"):
        load_checkpoint(tmp_path / "step_00000003")


def test_corrupt_file_raises_naming_it(tmp_path):
    path = save_checkpoint(tmp_path / "step_00000001", _state(1))
    f = path / "state.pt"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"step_00000001/state.pt.*sha256"):
        load_checkpoint(path)
    with pytest.warns(UserWarning, match="sha256"):
        assert find_latest_valid(tmp_path) is None


def test_empty_and_garbage(tmp_path):
    assert find_latest_valid(tmp_path / "nope") is None
    (tmp_path / "step_00000005").mkdir()
    (tmp_path / "step_00000005" / "manifest.json").write_text("{not json")
    (tmp_path / ".tmp-step_00000006-x").mkdir()  # an interrupted write: never a candidate
    with pytest.warns(UserWarning, match="unreadable manifest"):
        assert find_latest_valid(tmp_path) is None


def test_prune_keeps_last_and_best(tmp_path):
    scores = {1: 0.2, 2: 0.9, 3: None, 4: 0.3, 5: 0.1, 6: None}
    for step, score in scores.items():
        meta = {} if score is None else {"score": score}
        save_checkpoint(tmp_path / f"step_{step:08d}", _state(step), meta)
    (tmp_path / "step_00000000").mkdir()  # torn and old: removed
    removed = prune(tmp_path, keep_last=2)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["step_00000002", "step_00000005", "step_00000006"]
    assert len(removed) == 4
    prune(tmp_path, keep_last=1, best=tmp_path / "step_00000005")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000005", "step_00000006"]


def test_failed_write_leaves_nothing(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        save_checkpoint(tmp_path / "step_00000001", {"x": Unpicklable()})
    assert list(tmp_path.iterdir()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_latest_valid(tmp_path) is None
