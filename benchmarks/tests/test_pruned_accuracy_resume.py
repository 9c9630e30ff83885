"""``benchmarks/pruned/pruned_accuracy.py`` batches that outlive a session and run side by side.  A
batch killed inside a run and started again with ``--resume`` continues that run from its last
checkpoint and records the same test figures as an uninterrupted batch, and skips a run that
finished and is recorded; without ``--resume`` a run starts afresh; two batches writing one
table keep each other's rows.  Checked on real runs of the default preset (60 steps, a
checkpoint every 20)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT as REPO

SCRIPT = "benchmarks.pruned.pruned_accuracy"
RUN = "pruned-default-dense-s0-e2"


def batch(storage: Path, out: Path, *extra: str, steps: int = 60) -> subprocess.Popen:
    """The script on the default preset, ``steps`` steps with a checkpoint every 20."""
    cmd = [sys.executable, "-m", SCRIPT, "--presets", "default", "--ratios", "dense",
           "--epochs", "2", "--storage", str(storage), "--out", str(out),
           "--override", f"train.max_steps={steps}", "--override", "checkpoint.every_steps=20",
           *extra]  # fmt: skip
    return subprocess.Popen(
        cmd, cwd=REPO, start_new_session=True, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def entry(out: Path) -> dict:
    (e,) = json.loads((out / "pruned_accuracy.json").read_text())
    return e


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.integration
def test_a_killed_batch_resumes_its_run_and_records_the_uninterrupted_figures(tmp_path):
    straight = batch(tmp_path / "a", tmp_path / "out_a")
    killed = batch(tmp_path / "b", tmp_path / "out_b")
    first = tmp_path / "b" / "runs" / RUN / "checkpoints" / "step_00000020"
    deadline = time.monotonic() + 600
    while not first.is_dir():  # a checkpoint, written under a temporary name then renamed
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()[1]
        time.sleep(0.2)
    os.killpg(killed.pid, signal.SIGKILL)  # the batch and its training run, mid-run
    killed.wait()
    assert not (tmp_path / "out_b" / "pruned_accuracy.json").exists()  # nothing recorded yet
    finish(straight)

    finish(batch(tmp_path / "b", tmp_path / "out_b", "--resume"))
    whole, resumed = entry(tmp_path / "out_a"), entry(tmp_path / "out_b")
    assert whole["resumed_from_step"] is None
    assert 20 <= resumed["resumed_from_step"] < 60  # the last checkpoint before the kill
    assert "resume=true" in resumed["command"] and "resume=false" in whole["command"]
    assert resumed["test"] == whole["test"] and resumed["valid"] == whole["valid"]

    # --resume skips a finished run whose row is in the table; without it the run starts afresh
    finish(batch(tmp_path / "a", tmp_path / "out_a", "--resume"))
    assert entry(tmp_path / "out_a") == whole
    finish(batch(tmp_path / "a", tmp_path / "out_a"))
    assert entry(tmp_path / "out_a")["resumed_from_step"] is None
    assert len(list((tmp_path / "a" / "runs").glob(f"{RUN}.replaced-*"))) == 1


def test_a_priority_and_gate_other_than_the_defaults_name_the_run_and_label_its_row():
    from benchmarks.pruned.pruned_accuracy import Cell, command, prune_variant, run_name
    from cmpnn_dist.config import PruneConfig

    cell = Cell("fb237_ind_v1", "0.1", 0, 2, "/s", priority="mlp", gate="straight_through")
    cmd = command(*cell)
    assert cmd[-2:] == ["model.prune.priority=mlp", "model.prune.gate=straight_through"]
    assert "run_name=pruned-fb237_ind_v1-0.1-mlp-straight_through-s0-e2" in cmd
    assert prune_variant("constant", "mlp", "straight_through") == "mlp, straight_through"
    # the defaults: no override, no tag, the config's names in the label
    p = PruneConfig()
    assert not any("model.prune.priority" in a for a in command(*cell[:5]))
    assert run_name(*cell[:4], "relations", "none") == "pruned-fb237_ind_v1-0.1-rel-s0-e2"
    assert prune_variant("relations") == f"{p.priority}, {p.gate}, relations"


@pytest.mark.integration
def test_two_batches_side_by_side_keep_each_others_rows(tmp_path):
    procs = [
        batch(tmp_path / "s", tmp_path / "out", "--seeds", str(seed), steps=20) for seed in (0, 1)
    ]
    for proc in procs:
        finish(proc)
    rows = json.loads((tmp_path / "out" / "pruned_accuracy.json").read_text())
    assert sorted(e["seed"] for e in rows) == [0, 1]
    table = (tmp_path / "out" / "pruned_accuracy.md").read_text()
    assert all(f"pruned-default-dense-s{s}-e2" in table for s in (0, 1))
