"""Fast checks of the distributed package that need no Ray cluster.

Checkpoint selection over real checkpoint folders (written by ``save_checkpoint``, then
damaged the way a crash leaves them), dataset localisation through a pyarrow ``file://`` URI,
fault-spec parsing and settings validation.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from cmpnn_dist.config import Config
from cmpnn_dist.distributed import faults, remote
from cmpnn_dist.distributed.driver import DistributedTrainingError, backend_for, check_settings
from cmpnn_dist.runs.checkpoint import MANIFEST, STATE_FILE, load_checkpoint, save_checkpoint
from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from cmpnn_dist.storage.errors import StorageError


def checkpoint_candidates(run: str) -> list[tuple[int, str]]:
    return [(s, uri.rsplit("/", 1)[-1]) for s, uri in CheckpointStore(run).candidates()]


def select_checkpoint(run: str, scratch: Path, skipped: list[str] | None = None):
    """The store's choice; what it skipped and why goes to ``skipped``."""
    store = CheckpointStore(run, scratch=scratch)
    found = store.find_latest()
    if skipped is not None:
        skipped.extend(store.skipped)
    return None if found is None else (found.path, found.manifest, found.uri.rsplit("/", 1)[-1])


def _write(run: Path, step: int, tag: str) -> Path:
    """A checkpoint as older Ray runs named them: ``<run>/step_N-<token>`` (still found)."""
    state = {"step": step, "epoch": 0, "w": torch.full((64,), float(step))}
    return save_checkpoint(run / f"step_{step:08d}-{tag}", state)


def test_select_checkpoint_skips_truncated_and_manifestless(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, 3, "aaaa")
    _write(run, 6, "bbbb")
    truncated = _write(run, 9, "cccc")
    no_manifest = _write(run, 12, "dddd")
    (run / "not_a_checkpoint").mkdir()
    data = (truncated / STATE_FILE).read_bytes()
    (truncated / STATE_FILE).write_bytes(data[: len(data) // 2])
    (no_manifest / MANIFEST).unlink()

    assert [s for s, _ in checkpoint_candidates(str(run))] == [12, 9, 6, 3]
    messages: list[str] = []
    local, manifest, name = select_checkpoint(str(run), tmp_path / "scratch", messages)
    assert name == "step_00000006-bbbb" and manifest["step"] == 6
    assert torch.equal(load_checkpoint(local)["w"], torch.full((64,), 6.0))
    assert len(messages) == 2
    assert "step_00000012-dddd" in messages[0] and "manifest missing" in messages[0]
    assert "step_00000009-cccc" in messages[1] and "truncated" in messages[1]


def test_select_checkpoint_none_when_all_torn_or_absent(tmp_path: Path) -> None:
    assert select_checkpoint(str(tmp_path / "absent"), tmp_path) is None
    (_write(tmp_path / "run", 1, "x") / MANIFEST).unlink()
    skipped: list[str] = []
    assert select_checkpoint(str(tmp_path / "run"), tmp_path, skipped) is None
    assert len(skipped) == 1 and "step_00000001-x" in skipped[0]


def test_select_checkpoint_through_file_uri(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, 2, "a")
    bad = _write(run, 4, "b")
    (bad / STATE_FILE).write_bytes(b"x" * (bad / STATE_FILE).stat().st_size)  # same size
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    skipped: list[str] = []
    local, manifest, name = select_checkpoint(f"file://{run}", scratch, skipped)
    assert len(skipped) == 1 and re.search("step_00000004-b.*sha256", skipped[0])
    assert name == "step_00000002-a" and manifest["step"] == 2
    assert local.parent == scratch  # fetched, not read in place


def test_localize_dataset_copies_uri_once(tmp_path: Path) -> None:
    src = tmp_path / "ds"
    (src / "graphs" / "train").mkdir(parents=True)
    (src / "manifest.json").write_text('{"name": "x"}')
    (src / "graphs" / "train" / "a.arrow").write_bytes(bytes(range(256)) * 10)
    cache = tmp_path / "cache"
    local = remote.localize_dataset(f"file://{src}", cache)
    assert local != src and local.is_relative_to(cache)
    assert (local / "manifest.json").read_text() == '{"name": "x"}'
    assert (local / "graphs" / "train" / "a.arrow").read_bytes() == bytes(range(256)) * 10
    assert (local / remote.COMPLETE_MARKER).is_file()
    (src / "manifest.json").write_text("changed")  # a completed copy is reused, not refetched
    assert remote.localize_dataset(f"file://{src}", cache) == local
    assert (local / "manifest.json").read_text() == '{"name": "x"}'
    assert remote.localize_dataset(src, cache) == src.resolve()  # local paths: used in place
    with pytest.raises(StorageError, match="nope"):  # not retried by the workers
        remote.localize_dataset(f"file://{tmp_path}/nope", cache)


def test_runs_root_and_text_helpers(tmp_path: Path) -> None:
    assert remote.runs_root("s3://bucket/x/") == "s3://bucket/x/runs"
    assert remote.runs_root(tmp_path) == str(tmp_path.resolve() / "runs")
    uri = f"file://{tmp_path}/sub/r.json"
    remote.write_text(uri, "hello")
    assert remote.read_text(uri) == "hello" and remote.exists(uri)
    remote.write_text(str(tmp_path / "l" / "r.json"), "x")
    assert (tmp_path / "l" / "r.json").read_text() == "x"
    assert remote.is_nonempty_dir(str(tmp_path / "l"))
    assert not remote.is_nonempty_dir(str(tmp_path / "missing"))


def test_fault_specs() -> None:
    assert faults.parse_faults("kill@rank1:step5, stall@rank0:step2:always") == [
        faults.Fault("kill", 1, 5),
        faults.Fault("stall", 0, 2, always=True),
    ]
    assert faults.parse_faults("") == []
    with pytest.raises(ValueError, match="explode@rank1"):
        faults.parse_faults("explode@rank1:step2")


def test_crash_fault_fires_once_per_marker_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(faults.ENV_FAULT, "crash@rank0:step2")
    monkeypatch.setenv(faults.ENV_DIR, str(tmp_path))
    model = torch.nn.Linear(2, 1)
    faults.install(model, rank=0)
    x = torch.zeros(1, 2)
    model(x)
    with pytest.raises(faults.InjectedFault, match="step 2"):
        model(x)
    model(x)  # third call: not the faulty step
    other = torch.nn.Linear(2, 1)  # a restarted worker: the marker says it already fired
    faults.install(other, rank=0)
    other(x)
    other(x)
    assert (tmp_path / "crash-rank0-step2.fired").is_file()
    faults.log_attempt(0, "n1")
    faults.log_attempt(0, "n2")
    assert (tmp_path / "attempts.log").read_text().split() == [
        "rank0",
        f"pid{os.getpid()}",
        "noden1",
        "rank0",
        f"pid{os.getpid()}",
        "noden2",
    ]


def test_settings_are_checked() -> None:
    cfg = Config()
    cfg.cluster.num_workers = 3
    cfg.train.batch_size = 8
    with pytest.raises(DistributedTrainingError, match="divisible by cluster.num_workers=3"):
        check_settings(cfg)
    cfg.cluster.num_workers = 2
    check_settings(cfg)
    assert backend_for(cfg) == "gloo"
    cfg.cluster.backend = "nccl"
    with pytest.raises(DistributedTrainingError, match="use_gpu"):
        backend_for(cfg)


def _step_timer_ddp(store_path: str, results: Any) -> None:
    """Child process of the test below: plain vs DDP-wrapped gradients and the timer's
    summary, put on ``results``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from cmpnn_dist.distributed.timing import StepTimer

    dist.init_process_group("gloo", store=dist.FileStore(store_path, 1), rank=0, world_size=1)
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    wrapped = DistributedDataParallel(copy_of(plain))
    timer = StepTimer(enabled=True)
    timer.attach(wrapped)
    x = torch.randn(32, 6)
    for _ in range(3):
        for m in (plain, wrapped):
            m.zero_grad()
            m(x).pow(2).sum().backward()
    pairs = zip(plain.parameters(), wrapped.module.parameters(), strict=True)
    # Plain lists, not tensors: a tensor crosses a spawn queue as a file descriptor that the
    # child must still be alive to hand over, and this child may exit first.
    grads = [(p.grad.tolist(), q.grad.tolist()) for p, q in pairs]
    results.put((grads, timer.summary()))


@pytest.mark.integration
def test_step_timer_with_ddp_matches_plain_gradients(tmp_path: Path) -> None:
    """In a child process: tearing down a gloo group whose DDP reducer holds a Python comm
    hook can deadlock at exit (the group's destructor joins a gloo thread that wants the GIL),
    which must not hang the suite; the child reports its results first."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=_step_timer_ddp, args=(str(tmp_path / "store"), results))
    child.start()
    try:
        grads, summary = results.get(timeout=300)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join()
    for p, q in grads:
        torch.testing.assert_close(torch.tensor(p), torch.tensor(q))
    assert summary["steps"] == 3
    for key in ("forward_s", "backward_s", "all_reduce_s", "step_s"):
        assert summary[key] > 0, key


def copy_of(module: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(module)


def test_an_error_in_the_training_loop_carries_its_step(tmp_path: Path) -> None:
    """The trainer marks an exception with the step in progress; the crash record a worker
    hands the driver names it, with the cause in one line and the whole traceback."""
    from cmpnn_dist.distributed.crash_report import crash_record
    from cmpnn_dist.training.failure import step_of
    from cmpnn_dist.training.loop import fit
    from tests.helpers.training import Crash, crash_at, rule_kg, small_cfg

    with pytest.raises(Crash) as info:
        fit(small_cfg(), rule_kg(32), run_dir=tmp_path, on_step=crash_at(3))
    assert step_of(info.value) == 3
    record = crash_record(info.value, rank=1, node="n1")
    assert (record["rank"], record["step"], record["node"]) == (1, 3, "n1")
    assert record["cause"] == "Crash: simulated failure after step 3"
    assert record["traceback"].startswith("Traceback (most recent call last)")
    assert "in hook" in record["traceback"] and record["traceback"].rstrip().endswith(
        "Crash: simulated failure after step 3"
    )


def test_crash_summary_and_log(tmp_path: Path) -> None:
    """The one line names the last attempt's first failure; the log keeps every traceback
    and grows with each failed start of the run."""
    from cmpnn_dist.distributed import crash_report as cr
    from cmpnn_dist.training.failure import mark_step

    def record(exc: Exception, rank: int, step: int | None, attempt: int) -> dict[str, Any]:
        try:
            raise exc
        except Exception as raised:
            mark_step(raised, step)
            return {**cr.crash_record(raised, rank), "attempt": attempt}

    records = [
        record(ValueError("first attempt"), 0, 2, 1),
        record(RuntimeError("lost peer\nsecond line"), 1, 5, 2),
        record(KeyError("late"), 0, None, 2),
    ]
    error = RuntimeError("Training failed due to worker errors:\n[Rank 1 Error Snippet]")
    assert cr.summary(records, error) == "rank 1 at step 5: RuntimeError: lost peer"
    assert cr.where(records[2]) == "rank 0 before its first step: KeyError: 'late'"
    assert cr.summary([], error) == "RuntimeError: Training failed due to worker errors:"
    run = tmp_path / "run"
    path = cr.write_log(str(run), records, error)
    assert path == str(run / cr.LOG_FILE)
    text = Path(path).read_text()
    assert text.count("Traceback (most recent call last)") == 3
    assert "attempt 2: rank 1 at step 5: RuntimeError: lost peer" in text
    assert text.rstrip().endswith("[Rank 1 Error Snippet]")
    cr.write_log(str(run), records[:1], None)
    assert Path(path).read_text().startswith(text)
    assert Path(path).read_text().count("Traceback (most recent call last)") == 4


class _WorkerGroupError(RuntimeError):
    """The shape of Ray Train's error: the failure of each worker that failed, by rank."""

    def __init__(self, failures: dict[int, BaseException]) -> None:
        super().__init__("Training failed due to worker errors")
        self.worker_failures = failures


def test_a_killed_rank_is_named_not_the_rank_that_lost_it() -> None:
    """Rank 1 is SIGKILLed (it records nothing); rank 0 then fails in gloo with "connection
    reset by peer" and records that.  The one line names rank 1 at rank 0's step, and says
    what rank 0 saw; a real error of another rank still wins over a lost peer."""
    from cmpnn_dist.distributed import crash_report as cr
    from cmpnn_dist.training.failure import mark_step

    def record(exc: Exception, rank: int, step: int) -> dict[str, Any]:
        try:
            raise exc
        except Exception as raised:
            mark_step(raised, step)
            return {**cr.crash_record(raised, rank), "attempt": 1}

    gloo = RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection reset by peer")
    lost = record(gloo, 0, 4)
    died = RuntimeError("The actor died unexpectedly before finishing this task.")
    error = _WorkerGroupError({0: gloo, 1: died})
    assert cr.summary([lost], error) == (
        "rank 1 at step 4: its process died without an error (RuntimeError: The actor died "
        "unexpectedly before finishing this task.); rank 0 then lost its peer (RuntimeError: "
        "[gloo/transport/tcp/pair.cc:534] Connection reset by peer)"
    )
    real = record(ValueError("a real bug"), 1, 4)
    assert cr.summary([lost, real], error) == "rank 1 at step 4: ValueError: a real bug"
    # nobody else to blame: the lost peer is all there is to say
    assert cr.summary([lost], _WorkerGroupError({0: gloo})) == cr.where(lost)
