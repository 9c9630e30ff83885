"""Readers of a run folder (:func:`cmpnn_dist.runs.checkpoint_reader.read_checkpoint`):
read-only, and a checkpoint pruned or ``best`` half-published under them is one line.

The writer's side is the real :class:`CheckpointStore` (save, publish, prune); the race of
"pruned between listing and loading" is made exact by letting the store publish a newer
checkpoint (and prune, ``keep_last=1``) right after the reader listed the folder.  Every test
checks that the run folder is unchanged by the reader (files, inodes, sizes, times).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from cmpnn_dist.errors import UsageError
from cmpnn_dist.runs.checkpoint import CheckpointError, read_manifest, save_checkpoint
from cmpnn_dist.runs.checkpoint_reader import read_checkpoint
from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from tests.helpers.files import snapshot


def _publish(store: CheckpointStore, step: int, score: float, keep_last: int = 1) -> Path:
    state = {"step": step, "w": torch.full((8,), float(step))}
    path = save_checkpoint(store.write_path(step), state, {"score": score})
    store.publish(path, keep_last=keep_last)
    return path


def _pruning_after_listing(monkeypatch, store: CheckpointStore, step: int) -> None:
    """The next listing of the run's checkpoints is followed at once by the writer publishing
    checkpoint ``step`` and pruning the one just listed (``keep_last=1``)."""
    listing = CheckpointStore.candidates
    done = []

    def candidates(self):
        found = listing(self)
        if not done:
            done.append(step)
            _publish(store, step, score=0.0)
        return found

    monkeypatch.setattr(CheckpointStore, "candidates", candidates)


def test_a_run_folder_pruned_under_the_reader_gives_the_newest_with_one_line(tmp_path, monkeypatch):
    run = tmp_path / "run"
    store = CheckpointStore(run)
    _publish(store, 1, 0.5)
    _pruning_after_listing(monkeypatch, store, 2)
    lines: list[str] = []
    loaded = read_checkpoint(run, say=lines.append)
    assert loaded.state["step"] == 2 and torch.equal(loaded.state["w"], torch.full((8,), 2.0))
    step1, step2 = run / "checkpoints" / "step_00000001", run / "checkpoints" / "step_00000002"
    assert not step1.exists()  # pruned by the writer, under the reader
    assert lines == [
        f"{step1} was removed while being read (its run prunes old checkpoints): "
        f"using {step2} instead"
    ]
    monkeypatch.undo()
    before, lines = snapshot(run), []
    assert read_checkpoint(run, say=lines.append).location == str(step2) and lines == []
    assert snapshot(run) == before


def test_a_named_checkpoint_pruned_while_read_falls_back_with_one_line(tmp_path, monkeypatch):
    from cmpnn_dist.runs import checkpoint_reader

    run = tmp_path / "run"
    store = CheckpointStore(run)
    first = _publish(store, 1, 0.5)
    read_local = checkpoint_reader._read_local
    calls = []

    def pruned_first(folder: Path):
        if not calls:  # the writer publishes step 2 and prunes step 1 as the reader opens it
            calls.append(folder)
            _publish(store, 2, 0.0)
        return read_local(folder)

    monkeypatch.setattr(checkpoint_reader, "_read_local", pruned_first)
    lines: list[str] = []
    loaded = read_checkpoint(first, say=lines.append)
    assert calls == [first] and not first.exists()
    assert loaded.state["step"] == 2 and len(lines) == 1
    assert lines[0].startswith(f"{first} was removed while being read")
    assert lines[0].endswith(f"using {run / 'checkpoints' / 'step_00000002'} instead")


def _half_published(run: Path) -> None:
    """A run whose best is step 1 and whose better step 2 is being made ``best``: the old
    ``best`` moved aside, the staged copy not yet in place -- what a writer killed (or paused)
    between the two renames of :meth:`CheckpointStore.update_best` leaves."""
    store = CheckpointStore(run)
    _publish(store, 1, 0.5, keep_last=2)
    save_checkpoint(store.write_path(2), {"step": 2, "w": torch.zeros(8)}, {"score": 0.9})
    root = run / "checkpoints"
    shutil.copytree(root / "step_00000002", root / ".tmp-best-0000abcd")
    (root / "best").rename(root / ".old-best-0000abcd")


@pytest.mark.parametrize("uri", [False, True])
def test_a_half_published_best_falls_back_and_is_left_alone(tmp_path, uri):
    run = tmp_path / "run"
    _half_published(run)
    before, lines = snapshot(run), []
    where = f"file://{run}/checkpoints/best" if uri else run / "checkpoints" / "best"
    loaded = read_checkpoint(where, say=lines.append)
    assert snapshot(run) == before  # no repair: the staged copies are the writer's
    newest = (
        f"file://{run}/checkpoints/step_00000002"
        if uri
        else str(run / "checkpoints" / "step_00000002")
    )
    assert loaded.state["step"] == 2 and loaded.location == newest
    assert lines == [
        f"{where} is being replaced by its run (or was left half-replaced by a killed one): "
        f"using {newest} instead"
    ]
    # the lock holder's repair (at its next start) puts the staged copy in place
    assert CheckpointStore(run).repair_best() is not None
    assert read_manifest(run / "checkpoints" / "best")["step"] == 2


def test_a_corrupt_best_is_an_error_not_a_fallback(tmp_path):
    run = tmp_path / "run"
    store = CheckpointStore(run)
    _publish(store, 1, 0.5, keep_last=2)
    _publish(store, 2, 0.1, keep_last=2)
    best = run / "checkpoints" / "best"
    state = best / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))  # best is a copy: step 1's file stays intact
    before, lines = snapshot(run), []
    with pytest.raises(CheckpointError, match=f"{state}: sha256 does not match"):
        read_checkpoint(best, say=lines.append)
    assert lines == [] and snapshot(run) == before


def test_a_run_that_never_published_best_says_so(tmp_path):
    run = tmp_path / "run"
    store = CheckpointStore(run)
    path = save_checkpoint(store.write_path(1), {"step": 1}, {})  # no score: no best
    store.publish(path, keep_last=1)
    with pytest.raises(UsageError, match="checkpoints/best does not exist"):
        read_checkpoint(run / "checkpoints" / "best")
    with pytest.raises(UsageError, match="does not exist"):
        read_checkpoint(tmp_path / "nowhere" / "checkpoints" / "best")


def test_a_torn_newest_checkpoint_is_skipped_in_one_line(tmp_path):
    run = tmp_path / "run"
    store = CheckpointStore(run)
    _publish(store, 1, 0.5, keep_last=2)
    torn = _publish(store, 2, 0.1, keep_last=2)
    (torn / "manifest.json").unlink()  # a writer killed mid-write (nothing changes any more)
    before, lines = snapshot(run), []
    loaded = read_checkpoint(run, say=lines.append)
    assert loaded.state["step"] == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"using {run}/checkpoints/step_00000001, the newest valid")
    assert f"skipped {torn}/manifest.json: manifest missing" in lines[0]
    assert snapshot(run) == before
