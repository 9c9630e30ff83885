"""In-process run folders: restarts log each step once, resume=false moves the old run aside,
checkpoints every N minutes, the storage root, failed starts, and the CLI's first lines /
errors / evaluate on both checkpoint paths.

Real training runs (the small deterministic setup of test_training), real files, real
TensorBoard event files read back with TensorBoard's own loader.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmpnn_dist.runs import folder as rf
from cmpnn_dist.runs.checkpoint import list_checkpoints, load_checkpoint
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.training.loop import fit
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.training import Crash, crash_at, rule_kg, small_cfg


@pytest.fixture(scope="module")
def data():
    return rule_kg(32)


def csv_train_steps(run: Path) -> list[int]:
    with open(run / "metrics.csv") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r["kind"] == "train"]


def tb_events(run: Path) -> list[tuple[str, int]]:
    """Every (tag, step) scalar in every event file of the run, duplicates included."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out = []
    for path in sorted((run / "tensorboard").glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                out.append((value.tag, event.step))
    return out


def step_folders(run: Path) -> list[int]:
    return [s for s, _ in list_checkpoints(run / "checkpoints")]


def test_restart_logs_each_step_once_and_prunes(data, tmp_path, capfd):
    run = tmp_path / "run"
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=crash_at(13))  # steps 11-13 are lost
    assert [s for tag, s in tb_events(run) if tag == "train/loss"] == list(range(1, 14))
    res = fit(small_cfg(), data, run_dir=run)
    err = capfd.readouterr().err
    assert res.resumed_from_step == 10
    assert err.count("resuming from step") == 1, err  # announced once
    assert f"resuming from step 10: {run / 'checkpoints' / 'step_00000010'}" in err
    total = res.step
    assert csv_train_steps(run) == list(range(1, total + 1))
    events = tb_events(run)
    assert len(events) == len(set(events)), "duplicate TensorBoard events"
    assert [s for tag, s in events if tag == "train/loss"] == list(range(1, total + 1))
    assert sorted(s for tag, s in events if tag == "valid/mrr") == [total // 2, total]
    # keep_last=2 step folders plus the best copy, nothing left by the crashed attempt
    assert len(step_folders(run)) == 2 and step_folders(run)[-1] == total
    names = {p.name for p in (run / "checkpoints").iterdir()}
    assert names - {f"step_{s:08d}" for s in step_folders(run)} == {"best"}
    best = load_checkpoint(run / "checkpoints" / "best")
    assert best["step"] == res.best_step


def test_fresh_restart_when_every_checkpoint_is_invalid(data, tmp_path, capfd):
    run = tmp_path / "run"
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=crash_at(13))
    folders = [f"step_{step:08d}" for step in step_folders(run)]
    folders += ["best"] if (run / "checkpoints" / "best").is_dir() else []
    for name in folders:
        state = run / "checkpoints" / name / "state.pt"
        state.write_bytes(state.read_bytes()[:100])
    capfd.readouterr()
    res = fit(small_cfg(), data, run_dir=run)
    err = capfd.readouterr().err
    assert res.resumed_from_step is None
    lines = [line for line in err.splitlines() if "invalid" in line or "truncated" in line]
    assert len(lines) == 1 and f"({len(folders)} invalid, skipped: " in lines[0], err
    assert lines[0].endswith("): starting from step 0")
    for name in folders:
        assert f"{run}/checkpoints/{name}/state.pt: size 100 bytes" in lines[0]
    assert "Warning" not in err
    assert "resuming from step" not in err
    # the crashed attempt's rows (1..13) are gone, not mixed with the new ones
    assert csv_train_steps(run) == list(range(1, res.step + 1))
    events = tb_events(run)
    assert len(events) == len(set(events))
    assert load_checkpoint(run / "checkpoints" / "best")["step"] == res.best_step


def test_resume_false_moves_the_old_run_aside(data, tmp_path, capfd):
    run = tmp_path / "runs" / "r"
    first = fit(small_cfg(max_steps=6), data, run_dir=run)
    assert first.step == 6
    cfg = small_cfg(max_steps=3)
    cfg.resume = False
    second = fit(cfg, data, run_dir=run)
    assert second.resumed_from_step is None and second.step == 3
    moved = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("r.replaced-")]
    assert len(moved) == 1, list((tmp_path / "runs").iterdir())
    assert f"resume=false: moved the existing run folder to {moved[0]}" in capfd.readouterr().err
    assert step_folders(moved[0])[-1] == 6 and (moved[0] / "results.json").is_file()
    assert csv_train_steps(moved[0]) == list(range(1, 7))
    assert csv_train_steps(run) == [1, 2, 3] and step_folders(run) == [3]


class FakeClock:
    """The trainer's ``time`` module with a ``monotonic`` clock that moves only when a test
    moves it (everything else is the real module)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_every_minutes_writes_a_mid_epoch_checkpoint(data, tmp_path, monkeypatch):
    """every_minutes=0.05 (3 s) on a patched clock: steps take no time except step 2, after
    which the clock jumps 3.2 s, so the time check at the end of step 3 writes a checkpoint
    mid-epoch (and no other step does: the clock stands still after it); a crash at step 5
    resumes from it."""
    from cmpnn_dist.training import trainer

    clock = FakeClock()
    monkeypatch.setattr(trainer, "time", clock)
    cfg = small_cfg()
    cfg.checkpoint.every_steps = None
    cfg.checkpoint.every_minutes = 0.05
    cfg.checkpoint.keep_last = 10
    per_epoch = len(data.train.queries) // cfg.train.batch_size
    assert per_epoch > 5

    def hook(step: int) -> None:
        if step == 2:
            clock.now += 3.2
        if step == 5:
            raise Crash("after step 5")

    run = tmp_path / "run"
    with pytest.raises(Crash):
        fit(cfg, data, run_dir=run, on_step=hook)
    assert step_folders(run) == [3]
    manifest = json.loads((run / "checkpoints" / "step_00000003" / "manifest.json").read_text())
    assert manifest["epoch"] == 0 and "score" not in manifest["meta"]  # no validation: mid-epoch
    cfg.checkpoint.every_minutes = None
    assert fit(cfg, data, run_dir=run).resumed_from_step == 3
    # without the jump, no step is due: the same run writes no mid-epoch checkpoint
    cfg.checkpoint.every_minutes = 0.05
    other = tmp_path / "other"
    with pytest.raises(Crash):
        fit(cfg, data, run_dir=other, on_step=crash_at(5))
    assert step_folders(other) == []


def test_max_minutes_ends_training_as_the_step_budget_does(data, tmp_path, monkeypatch):
    """train.max_minutes=0.05 (3 s) on a patched clock that jumps 3.2 s after step 3: step 4 is
    the last one, and the run ends exactly as ``train.max_steps=4`` does (the reference, same
    seed): validated at step 4, a checkpoint there with its score, ``best``, the same valid and
    test metrics.  Rerun with the budget spent, it resumes at step 4 and trains no further;
    rerun with a larger budget, it trains on."""
    from cmpnn_dist.training import trainer

    clock = FakeClock()
    monkeypatch.setattr(trainer, "time", clock)
    cfg = small_cfg()
    cfg.checkpoint.every_steps = None
    cfg.checkpoint.every_minutes = None
    assert len(data.train.queries) // cfg.train.batch_size > 4  # step 4 is mid-epoch

    reference = fit(small_cfg(max_steps=4), data, run_dir=tmp_path / "steps")
    cfg.checkpoint.every_steps = None
    cfg.train.max_minutes = 0.05

    def hook(step: int) -> None:
        if step == 3:
            clock.now += 3.2

    run = tmp_path / "minutes"
    result = fit(cfg, data, run_dir=run, on_step=hook)
    assert result.step == 4 and result.best_step == 4
    assert result.best_valid == reference.best_valid and result.test == reference.test
    manifest = json.loads((run / "checkpoints" / "step_00000004" / "manifest.json").read_text())
    assert manifest["meta"]["score"] == reference.best_valid["mrr"]  # validated weights
    assert (run / "checkpoints" / "best" / "manifest.json").is_file()
    state = load_checkpoint(run / "checkpoints" / "step_00000004")
    assert state["train_seconds"] >= 3.0
    with open(run / "metrics.csv") as f:
        kinds = [(r["kind"], int(r["step"])) for r in csv.DictReader(f)]
    assert kinds[-2:] == [("valid", 4), ("test", 4)]

    again = fit(cfg, data, run_dir=run)  # the budget is spent: nothing more to train
    assert again.resumed_from_step == 4 and again.step == 4 and again.test == reference.test
    cfg.train.max_minutes = 10.0
    longer = fit(cfg, data, run_dir=run)  # a larger budget: trains on to the epochs' end
    assert longer.resumed_from_step == 4 and longer.step > 4


def test_a_step_budget_ending_a_time_budget_says_so(data, tmp_path, capfd):
    """train.max_minutes with a step or epoch budget that ends training first: one line names
    the budget that ended it and how to lift it; none when the time budget is unset, or
    when it ended training (the test above)."""
    cfg = small_cfg(max_steps=4)
    cfg.train.max_minutes = 10.0
    assert fit(cfg, data, run_dir=tmp_path / "steps").step == 4
    err = capfd.readouterr().err
    assert "train.max_steps=4 ended training at step 4 after 0.0 of train.max_minutes=10.0 " \
        "minutes (train.max_steps=null lifts it)" in err, err  # fmt: skip
    cfg = small_cfg(epochs=1)
    cfg.train.max_minutes = 10.0
    res = fit(cfg, data, run_dir=tmp_path / "epochs")
    err = capfd.readouterr().err
    assert f"train.epochs=1 ended training at step {res.step} after" in err, err
    assert "(a larger train.epochs lifts it)" in err
    again = fit(cfg, data, run_dir=tmp_path / "epochs")  # finished: nothing trained, no line
    assert again.step == res.step and "ended training" not in capfd.readouterr().err
    fit(small_cfg(max_steps=4), data, run_dir=tmp_path / "no_budget")
    assert "ended training" not in capfd.readouterr().err


def test_report_shows_the_seconds_trained_over_every_piece(data, tmp_path, monkeypatch):
    """Each step takes 1 s on a patched clock.  The first piece dies after step 13 (its last
    checkpoint: step 10, 9 s trained); the resumed piece trains steps 11 to the end.  The
    report's train seconds are the whole run's (what the last checkpoint counted), not the
    resumed piece's own."""
    from cmpnn_dist.cli.report import read_metrics, summarize
    from cmpnn_dist.training import trainer

    clock = FakeClock()
    monkeypatch.setattr(trainer, "time", clock)

    def tick(step: int) -> None:
        clock.now += 1.0
        if step == 13:
            raise Crash("simulated failure")

    run = tmp_path / "run"
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=tick)
    res = fit(small_cfg(), data, run_dir=run, on_step=lambda s: tick(0))
    assert res.resumed_from_step == 10
    last = load_checkpoint(run / "checkpoints" / f"step_{res.step:08d}")
    # steps 1-9 before the step-10 checkpoint, 11 to the last but one after the resume
    assert last["train_seconds"] == 9 + (res.step - 11)
    summary = summarize(read_metrics(run / "metrics.csv"))
    assert summary["train_seconds"] == last["train_seconds"]
    assert summary["train_seconds"] > res.step - 11 + 1  # more than the resumed piece's own


def test_failed_start_leaves_no_run_folder(data, tmp_path):
    cfg = small_cfg()
    cfg.model.aggregate = "bogus"  # fails while building the model, before any step
    run = tmp_path / "runs" / "bad"
    with pytest.raises(Exception):  # noqa: B017 - whatever the model raises
        fit(cfg, data, run_dir=run)
    assert not run.exists()
    # a run that dies before its first checkpoint: the CLI removes the folder it created
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=crash_at(2))
    assert run.is_dir() and step_folders(run) == []
    assert rf.remove_failed_start(str(run), existed_before=False) and not run.exists()
    with pytest.raises(Crash):
        fit(small_cfg(), data, run_dir=run, on_step=crash_at(6))
    assert not rf.remove_failed_start(str(run), existed_before=False)  # holds a checkpoint
    assert step_folders(run) == [5]


def test_storage_root_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv(rf.ENV_STORAGE_ROOT, raising=False)
    monkeypatch.chdir(tmp_path)
    assert rf.default_storage_root() == str(tmp_path / "storage")
    monkeypatch.setenv(rf.ENV_STORAGE_ROOT, "~/elsewhere")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rf.default_storage_root() == str(tmp_path / "home" / "elsewhere")
    monkeypatch.setenv(rf.ENV_STORAGE_ROOT, "s3://bucket/cmpnn")
    assert rf.default_storage_root() == "s3://bucket/cmpnn"
    # a `ray job submit --working-dir .` copy: never the default, never a relative root
    monkeypatch.delenv(rf.ENV_STORAGE_ROOT)
    pkg = tmp_path / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_1"
    pkg.mkdir(parents=True)
    monkeypatch.chdir(pkg)
    assert rf.default_storage_root() == str(tmp_path / "home" / "cmpnn_dist" / "storage")
    with pytest.raises(StorageError, match="storage_root=storage is relative"):
        rf.resolve_storage_root("storage")
    assert rf.resolve_storage_root(str(tmp_path / "abs")) == str(tmp_path / "abs")


def run_module(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    "case", ["not_a_directory", "not_writable", "full"], ids=lambda c: c.replace("_", "-")
)
def test_bad_storage_root_is_one_error_line(tmp_path, case):
    env = {}
    if case == "not_a_directory":
        (tmp_path / "file").write_text("x")
        root, expect = tmp_path / "file" / "storage", "is not a directory"
    elif case == "not_writable":  # sysfs refuses new folders even to root
        root, expect = Path("/sys/fs/cmpnn_storage"), "is not writable"
    else:  # more free space asked for than the disk has: the check a full disk fails
        root, expect = tmp_path / "s", "MB free, need at least"
        env = {rf.ENV_MIN_FREE_MB: str(10**12)}
    proc = run_module("cmpnn_dist.train", f"storage_root={root}", "run_name=x", env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expect in errors[0] and str(root) in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "runs").exists()


TINY = [
    "data.name=tiny",
    "+data.synthetic.num_entities=60",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "train.batch_size=4",
    "train.num_negatives=8",
    "train.max_steps=8",
    "train.progress=false",
    "train.deterministic=true",
    "eval.max_queries=16",
    "checkpoint.every_steps=3",
]


@pytest.mark.integration
def test_cli_first_lines_and_evaluate_on_both_checkpoint_paths(tmp_path):
    proc = run_module("cmpnn_dist.train", f"storage_root={tmp_path}", "run_name=r", *TINY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "r"
    lines = proc.stderr.splitlines()
    # the dataset is built (or checked) first: missing data fails before a run is announced
    assert lines[0].startswith("building dataset tiny from synthetic:rule_kg")
    lines = lines[1:]
    assert lines[0] == f"run folder: {run}  (storage_root {tmp_path}, from storage_root=)"
    assert lines[1].startswith("resume with: python -m cmpnn_dist.train storage_root=")
    assert lines[1].endswith(" run_name=r")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "best",
        "step_00000006",
        "step_00000008",
    ]
    for ckpt in (run, run / "checkpoints", run / "checkpoints" / "best"):
        ev = run_module("cmpnn_dist.evaluate", f"ckpt={ckpt}", f"storage_root={tmp_path}")
        assert ev.returncode == 0, ev.stderr[-3000:]
        got = json.loads(ev.stdout.strip().splitlines()[-1])
        assert got["run_dir"] == str(run)
        # weights=best (default) evaluates the best weights: the run's own test figures
        assert got["test"]["mrr"] == pytest.approx(out["test"]["mrr"], abs=1e-6)
    # the printed resume command on the finished run: nothing to train, said in one line
    again = run_module("cmpnn_dist.train", f"storage_root={tmp_path}", "run_name=r", *TINY)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to train: run 'r' finished at step 8" in again.stderr


@pytest.mark.parametrize(
    "name",
    [
        "demo",
        "readout_v1/train.seed=0,data=fb237_ind_v1,model.readout=sum",
        "it's mine",
        "a\\b c",
        "ends in \\",
        "a \\' b",
    ],  # fmt: skip
)
def test_the_resume_line_names_the_run_as_hydra_reads_it_back(name):
    """The printed command resumes that very run: Hydra's override parser (what the CLI
    composes with) reads its run_name back as the run's name, a sweep cell's included."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = rf.banner("/s/runs/x", "/s", ["conf=fb237_ind_v1", "run_name=old"], name)
    argv = shlex.split(lines[1].removeprefix("resume with: "))
    assert argv[:4] == ["python", "-m", "cmpnn_dist.train", "conf=fb237_ind_v1"]
    parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(argv[3:])}
    assert parsed == {"conf": "fb237_ind_v1", "run_name": name}
    assert (rf.override_value(name) == name) == (name == "demo")
