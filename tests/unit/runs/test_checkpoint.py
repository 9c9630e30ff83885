"""Atomic checksummed checkpoints: round trip, torn / corrupt detection; the run-level store
(one layout for in-process and Ray runs, pruning, ``best``, URIs, scratch folders)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from cmpnn_dist.runs.checkpoint import (
    CheckpointError,
    is_fatal_os_error,
    load_checkpoint,
    read_manifest,
    save_checkpoint,
)
from cmpnn_dist.runs.checkpoint_store import (
    ENV_SCRATCH,
    CheckpointStore,
    scratch_dir,
)
from tests.helpers.paths import REPO_ROOT


def _latest(run):
    """The store's one discovery rule (CheckpointStore.find_latest): its local folder."""
    found = CheckpointStore(run).find_latest()
    return None if found is None else found.path


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
    assert _latest(tmp_path) == tmp_path / "step_00000003"
    state_file = tmp_path / "step_00000003" / "state.pt"
    data = state_file.read_bytes()
    state_file.write_bytes(data[: len(data) // 2])  # truncated
    (tmp_path / "step_00000002" / "manifest.json").unlink()  # manifest missing
    store = CheckpointStore(tmp_path)
    assert store.find_latest().path == tmp_path / "step_00000001"
    messages = store.skipped
    assert len(messages) == 2
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
    store = CheckpointStore(tmp_path)
    assert store.find_latest() is None and "sha256" in store.skipped[0]


def test_empty_and_garbage(tmp_path):
    assert _latest(tmp_path / "nope") is None
    (tmp_path / "step_00000005").mkdir()
    (tmp_path / "step_00000005" / "manifest.json").write_text("{not json")
    (tmp_path / ".tmp-step_00000006-x").mkdir()  # an interrupted write: never a candidate
    store = CheckpointStore(tmp_path)
    assert store.find_latest() is None
    assert len(store.skipped) == 1 and "unreadable manifest" in store.skipped[0]


def _store_with(run: Path, scores: dict[int, float | None]) -> CheckpointStore:
    """Checkpoints written and published the way both contexts do it (write, commit, best)."""
    store = CheckpointStore(run)
    for step, score in scores.items():
        meta = {} if score is None else {"score": score}
        path = save_checkpoint(store.write_path(step), _state(step), meta)
        store.commit(path)
        store.update_best(path, read_manifest(path))
    return store


def test_prune_keeps_last_and_best(tmp_path):
    run = tmp_path / "run"
    store = _store_with(run, {1: 0.2, 2: 0.9, 3: None, 4: 0.3, 5: 0.9, 6: None})
    (run / "checkpoints" / "step_00000000").mkdir()  # torn and old: removed
    removed = store.prune(keep_last=2)
    left = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert left == ["best", "step_00000005", "step_00000006"]
    assert len(removed) == 5
    best = load_checkpoint(run / "checkpoints" / "best")  # highest score, earliest on ties
    assert best["step"] == 2 and torch.equal(best["w"], _state(2)["w"])
    assert store.best_score() == 0.9


def test_best_is_a_real_copy_and_outlives_its_step_folder(tmp_path):
    """``best`` has its own files (one damaged file cannot take both), with the same bytes."""
    store = _store_with(tmp_path / "run", {3: 0.5})
    src = Path(store.root) / "step_00000003" / "state.pt"
    best = Path(store.best_uri) / "state.pt"
    assert os.stat(src).st_ino != os.stat(best).st_ino and os.stat(best).st_nlink == 1
    assert src.read_bytes() == best.read_bytes()
    _store_with(tmp_path / "run", {6: 0.1, 9: None})
    store.prune(keep_last=1)
    assert not src.exists() and load_checkpoint(best.parent)["step"] == 3


def test_prune_after_a_restart_leaves_keep_last(tmp_path):
    """A killed attempt leaves a checkpoint the next attempt does not know about (here the
    folder of an older Ray run's naming and an interrupted write): pruning works from the
    folder listing, so the restarted run still ends with exactly keep_last checkpoints."""
    run = tmp_path / "run"
    _store_with(run, {3: None, 6: None})
    save_checkpoint(run / "step_00000004-0a1b2c3d", _state(4))  # left by an older Ray attempt
    (run / "checkpoints" / ".tmp-step_00000009-x").mkdir()  # interrupted write
    restarted = CheckpointStore(run)
    assert restarted.find_latest().step == 6
    assert restarted.discard_partial() == [str(run / "checkpoints" / ".tmp-step_00000009-x")]
    _store_with(run, {9: None, 12: None})
    restarted.prune(keep_last=2)
    assert [s for s, _ in restarted.candidates()] == [12, 9]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints"]


LEGACY = REPO_ROOT / "tests" / "fixtures" / "legacy_ray_run"


def test_store_finds_legacy_ray_and_new_layout(tmp_path):
    """A checkpoint in Ray's layout, ``step_N-<token>`` directly in the run folder, written by
    another version of the code (``tests/fixtures/legacy_ray_run``, with its command and
    version).  The store finds it, its sha256 sums check out and its state loads; a newer
    checkpoint in the ``checkpoints/step_N`` layout then wins."""
    run = tmp_path / "run"
    shutil.copytree(LEGACY, run)
    store = CheckpointStore(run)
    found = store.find_latest()
    assert found.uri == str(run / "step_00000004-0a1b2c3d") and found.step == 4
    assert store.skipped == []
    state = load_checkpoint(found.path)
    assert state["step"] == 4 and state["epoch"] == 0
    assert {"model", "optimizer", "sampler", "rng", "config", "best"} <= set(state)
    save_checkpoint(store.write_path(8), _state(8))
    found = store.find_latest()
    assert found.step == 8 and found.path == run / "checkpoints" / "step_00000008"


@pytest.mark.integration
def test_evaluate_reads_the_legacy_checkpoint(tmp_path):
    """``python -m cmpnn_dist.evaluate`` on the legacy run folder rebuilds the model from the
    stored state and gives the metrics that run reported (the same weights, ranks)."""
    run = tmp_path / "runs" / "legacy"
    shutil.copytree(LEGACY, run)
    proc = subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.evaluate", f"ckpt={run}", f"storage_root={tmp_path}",
         "eval.max_queries=8"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["checkpoint"] == str(run / "step_00000004-0a1b2c3d")
    then = json.loads((LEGACY / "results_at_commit.json").read_text())
    for split in ("valid", "test"):
        for key in ("mr", "mrr", "hits@1", "hits@10", "num_queries"):
            assert out[split][key] == pytest.approx(then[split][key], rel=1e-9), (split, key)


@pytest.mark.integration
def test_evaluate_reads_a_saved_config_naming_torchdrug(tmp_path):
    """A checkpoint whose saved config says ``eval.hits_negatives_rule: torchdrug`` (the name
    NBFNet-PyG's C(49, i) rule had): ``evaluate`` loads it and scores Hits@10_50 under
    ``nbfnet_pyg``, checked against the run's own per-query ranks by hand (exact fractions;
    NBFNet-PyG ``script/run.py``: p = (rank - 1) / candidates, C(49, i))."""
    from fractions import Fraction
    from math import comb

    import pyarrow.parquet as pq

    state = load_checkpoint(LEGACY / "step_00000004-0a1b2c3d")
    state["config"]["eval"]["hits_negatives_rule"] = "torchdrug"
    run = tmp_path / "runs" / "old"
    save_checkpoint(run / "checkpoints" / "step_00000004", state)
    proc = subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.evaluate", f"ckpt={run}", f"storage_root={tmp_path}",
         "eval.max_queries=8"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["test"]["hits_negatives_rule"] == "nbfnet_pyg"
    ranks = pq.read_table(Path(out["evaluation_dir"]) / "ranks_test_all.parquet").to_pydict()
    pairs = list(zip(ranks["rank"], ranks["candidates"], strict=True))
    assert len(pairs) == out["test"]["num_queries"] == 16

    def c49(rank: float, cands: int) -> Fraction:
        p = Fraction(int(rank) - 1, cands)
        return sum(comb(49, i) * p**i * (1 - p) ** (49 - i) for i in range(10))

    want = sum(c49(r, c) for r, c in pairs) / len(pairs)
    assert out["test"]["hits@10_50"] == pytest.approx(float(want), rel=1e-12)


def test_store_through_a_file_uri(tmp_path):
    """A pyarrow URI run folder: staged in scratch, uploaded manifest last, fetched back."""
    run = f"file://{tmp_path}/remote/run"
    store = CheckpointStore(run, scratch=tmp_path / "scratch")
    for step, score in ((2, 0.4), (4, 0.1), (6, None)):
        local = save_checkpoint(store.write_path(step), _state(step), {"score": score})
        assert local.is_relative_to(tmp_path / "scratch")
        assert store.commit(local) == f"{run}/checkpoints/step_{step:08d}"
        store.update_best(local, read_manifest(local))
    store.prune(keep_last=2)
    on_disk = tmp_path / "remote" / "run" / "checkpoints"
    assert sorted(p.name for p in on_disk.iterdir()) == ["best", "step_00000004", "step_00000006"]
    assert json.loads((on_disk / "best" / "manifest.json").read_text())["step"] == 2
    (on_disk / "step_00000006" / "manifest.json").unlink()  # torn on the remote side
    other = CheckpointStore(run, scratch=tmp_path / "scratch2")
    found = other.find_latest()
    assert len(other.skipped) == 1
    assert "step_00000006" in other.skipped[0] and "manifest missing" in other.skipped[0]
    assert found.step == 4 and found.path.is_relative_to(tmp_path / "scratch2")
    assert torch.equal(load_checkpoint(found.path)["w"], _state(4)["w"])


@pytest.mark.integration
def test_scratch_of_dead_processes_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_SCRATCH, str(tmp_path))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)  # the process has exited: a SIGKILLed worker's leftovers
    leaked = tmp_path / f"cmpnn-rank1-pid{dead_pid}-abcd"
    (leaked / "checkpoints").mkdir(parents=True)
    alive = tmp_path / f"cmpnn-rank0-pid{os.getppid()}-efgh"  # a live process: kept
    alive.mkdir()
    other = tmp_path / "someone-else"
    other.mkdir()
    mine = scratch_dir("rank0")
    assert not leaked.exists() and alive.exists() and other.exists()
    assert mine.parent == tmp_path and mine.name.startswith(f"cmpnn-rank0-pid{os.getpid()}-")
    store = CheckpointStore(f"file://{tmp_path}/r", scratch_tag="rank3")
    assert store.scratch.name.startswith("cmpnn-rank3-")
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, other.name, mine.name])


@pytest.mark.integration
def test_scratch_of_a_reused_pid_is_removed(tmp_path, monkeypatch):
    """A folder named for a pid that a later, unrelated process holds now (the pid counter
    wrapped) is the dead owner's: dropped; the same pid's folder written since it began is
    kept."""
    monkeypatch.setenv(ENV_SCRATCH, str(tmp_path))
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        old = tmp_path / f"cmpnn-rank1-pid{later.pid}-abcd"
        (old / "checkpoints").mkdir(parents=True)
        hour_ago = time.time() - 3600  # written an hour before ``later`` began
        os.utime(old, (hour_ago, hour_ago))
        fresh = tmp_path / f"cmpnn-rank2-pid{later.pid}-efgh"
        fresh.mkdir()
        mine = scratch_dir("rank0")  # drops the dead folders of its base first
        assert not old.exists() and fresh.exists() and mine.exists()
    finally:
        later.kill()
        later.wait()


def test_write_errors_that_cannot_succeed(tmp_path):
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as info:
            os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    assert info.value.errno == errno.ENOSPC and is_fatal_os_error(info.value)
    assert not is_fatal_os_error(OSError(errno.EINTR, "interrupted"))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*file/sub/step_00000001"):
        save_checkpoint(blocker / "sub" / "step_00000001", _state(1))


def test_failed_write_leaves_nothing(tmp_path):
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        save_checkpoint(tmp_path / "step_00000001", {"x": Unpicklable()})
    assert list(tmp_path.iterdir()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _latest(tmp_path) is None


def test_a_checkpoint_saved_before_a_model_option_existed_still_resumes():
    """A checkpoint another version wrote (its model section lacks every option added since,
    such as model.init_noise or model.propagation) resumes under the options' defaults, which
    is what it trained with, and is refused under any other value."""
    from cmpnn_dist.config import Config, config_to_dict
    from cmpnn_dist.runs.restore import check_resumable

    ckpt = LEGACY / "step_00000004-0a1b2c3d"
    state = torch.load(ckpt / "state.pt", weights_only=False, map_location="cpu")
    assert "init_noise" not in state["config"]["model"]
    cfg = Config()  # the fixture's command: model.num_layers=2 hidden_dim=8 decoder_hidden_dim=8
    cfg.model.num_layers, cfg.model.hidden_dim, cfg.model.decoder_hidden_dim = 2, 8, 8
    check_resumable(ckpt, state, config_to_dict(cfg)["model"], state["data"])
    cfg.model.init_noise = "uniform"
    with pytest.raises(CheckpointError, match="written for model config"):
        check_resumable(ckpt, state, config_to_dict(cfg)["model"], state["data"])
