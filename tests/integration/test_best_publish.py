"""``checkpoints/best`` survives a kill at any file operation of publishing a checkpoint.

A forked child publishes a new, better checkpoint (:meth:`CheckpointStore.publish`: verify,
commit, update ``best``, prune) with an audit hook that kills it (``os._exit``) at the k-th
file operation (every ``open``, rename, link, mkdir, remove, rmtree), for k = 1, 2, ... until
one run completes.  After each kill a reader (what ``evaluate`` / ``predict`` on ``.../best``
run: :func:`~cmpnn_dist.runs.checkpoint_reader.read_checkpoint`) gets the old best, the
new one or -- ``best`` half-published -- the newest complete checkpoint with one line saying
so, and changes nothing in the run folder; then :meth:`CheckpointStore.repair_best` (run at
every resume, by the run lock's holder) must leave a ``best`` whose manifest and sha256 sums
check out and that is the old best or the new one -- never none, never a mix.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from cmpnn_dist.runs.checkpoint import read_manifest, save_checkpoint
from cmpnn_dist.runs.checkpoint_reader import read_checkpoint
from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from tests.helpers.files import snapshot

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests

EVENTS = {
    "open", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.link", "os.mkdir",
    "shutil.rmtree", "shutil.copytree", "os.unlink",
}  # fmt: skip


def _publish_killed_at(run: Path, new: Path, k: int) -> int:
    """Publish ``new`` in a forked child killed at its k-th file operation; its exit status
    (9: killed, 0: completed)."""
    pid = os.fork()
    if pid == 0:  # the child: only file operations, then os._exit (no pytest teardown)
        count = 0

        def hook(event: str, args: tuple) -> None:
            nonlocal count
            if event in EVENTS:
                count += 1
                if count == k:
                    os._exit(9)

        try:
            store = CheckpointStore(run)
            sys.addaudithook(hook)
            store.publish(new, keep_last=1)
        finally:
            os._exit(0 if count < k else 9)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _checkpoint(root: Path, step: int, score: float) -> Path:
    state = {"step": step, "w": torch.full((64,), float(step))}
    return save_checkpoint(root / f"step_{step:08d}", state, {"score": score})


def _make_run(base: Path) -> tuple[Path, Path]:
    """A run folder whose best is step 1 (score 0.1) and a new step-2 checkpoint (0.5)."""
    run = base / "run"
    root = run / "checkpoints"
    first = _checkpoint(root, 1, 0.1)
    store = CheckpointStore(run)
    store.publish(first, keep_last=2)
    return run, _checkpoint(root, 2, 0.5)


def test_best_stays_valid_whatever_file_operation_the_kill_hits(tmp_path):
    pristine, _ = _make_run(tmp_path / "pristine")
    kills, scores, fallbacks = 0, set(), 0
    for k in range(1, 400):
        work = tmp_path / f"k{k}"
        shutil.copytree(pristine.parent, work)
        run, new = work / "run", work / "run" / "checkpoints" / "step_00000002"
        status = _publish_killed_at(run, new, k)
        assert status in (0, 9)
        before, lines = snapshot(run), []
        loaded = read_checkpoint(run / "checkpoints" / "best", say=lines.append)
        assert snapshot(run) == before, f"the reader changed the run folder (kill at {k})"
        assert loaded.state["step"] in (1, 2) and len(lines) <= 1
        if lines:  # best half-published: the newest complete checkpoint, said in one line
            assert not (run / "checkpoints" / "best").exists()
            assert loaded.location == str(new) and lines[0].endswith(f"using {new} instead")
            fallbacks += 1
        store = CheckpointStore(run)
        assert store.repair_best() is not None, f"no best after a kill at operation {k}"
        manifest = read_manifest(run / "checkpoints" / "best", verify_checksums=True)
        scores.add(manifest["meta"]["score"])
        assert manifest["meta"]["score"] in (0.1, 0.5)
        leftovers = [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
        assert leftovers == []
        shutil.rmtree(work)
        if status == 0:
            assert manifest["meta"]["score"] == 0.5
            break
        kills += 1
    else:
        raise AssertionError("publish never completed")
    assert kills >= 5 and scores == {0.1, 0.5}  # both sides of the swap were hit
    assert fallbacks >= 1  # a kill left best half-published, and the reader coped
