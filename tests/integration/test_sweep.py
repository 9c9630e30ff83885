"""Sweeps: Hydra's multirun grammar expanded into cells, reports against a hand-made fixture
sweep, and (slow) a 2 x 2 sweep on a real ``ray start --head`` cluster killed after its first
finished cell and restarted, a sweep stopped by Ctrl-C and continued, one stopped by
``ray job stop``, and a sweep with a failed cell."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cmpnn_dist.paper import SPLITS, paper_value, peer_values
from cmpnn_dist.runs.sweep import expand, report, summarize, write_results_csv
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.ray_head import Head
from tests.helpers.real_run import TINY, hold_lock, logged_train_steps


def test_expand_is_the_cartesian_product_in_hydra_order():
    fixed, cells = expand(["train.lr=0.01", "model.aggregate=sum,pna", "train.seed=range(0,3)"])
    assert fixed == ["train.lr=0.01"]
    assert [c.overrides for c in cells] == [
        (f"model.aggregate={a}", f"train.seed={s}") for a in ("sum", "pna") for s in range(3)
    ]
    assert cells[4].cell_id == "model.aggregate=pna,train.seed=1"
    assert [c.overrides for c in expand(["train.lr=0.1"])[1]] == [()]


def _fixture_sweep(tmp_path: Path) -> Path:
    """Two design points x three seeds on wn18rr_ind_v1; one seed of INIT 0 unfinished."""
    sweep = tmp_path / "sweeps" / "init"
    cells = []
    values = {0: [0.60, 0.64, None], 2: [0.93, 0.92, 0.94]}
    for init, hits in values.items():
        for seed, h in enumerate(hits):
            run = tmp_path / "runs" / "init" / f"model.init={init},train.seed={seed}"
            run.mkdir(parents=True)
            if h is not None:
                test = {"hits@10_50": h, "mrr": h / 2, "hits_negatives_rule": "paper"}
                result = {"valid": {"mrr": 0.5}, "test": test}
                (run / "results.json").write_text(json.dumps(result))
            sig = {"data.name": "wn18rr_ind_v1", "model.family": "cmpnn",
                   "model.aggregate": "sum", "model.message": 1, "model.history": "t",
                   "model.init": init, "model.readout": "none"}  # fmt: skip
            cells.append({"cell_id": run.name, "run_dir": str(run), "signature": sig,
                          "overrides": [f"model.init={init}", f"train.seed={seed}"]})  # fmt: skip
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"preset": "wn18rr_ind_v1", "cells": cells}))
    return sweep


def test_report_means_sample_std_and_the_paper_beside(tmp_path):
    sweep = _fixture_sweep(tmp_path)
    rows = {r["point"]: r for r in summarize(sweep)}
    assert set(rows) == {"model.init=0", "model.init=2"}
    assert rows["model.init=0"]["seeds"] == 2  # the unfinished seed is not counted
    mean, std = rows["model.init=0"]["test_hits@10_50"]
    assert mean == pytest.approx(0.62) and std == pytest.approx(0.0282842712, rel=1e-6)
    mean, std = rows["model.init=2"]["test_hits@10_50"]
    assert mean == pytest.approx(0.93) and std == pytest.approx(0.01)  # sample std (n - 1)
    assert rows["model.init=0"]["paper test_hits@10_50"] == (
        0.615, "inductive-table-initialization")  # fmt: skip
    md, plots = report(sweep)
    text = md.read_text()
    assert "| model.init=0 | 2 | 0.310 +- 0.014 |" in text  # test_mrr column first
    assert "0.620 +- 0.028 | 0.615 | 0.948 |" in text and "0.930 +- 0.010 | 0.932 | 0.948 |" in text
    assert "NBFNet (published)" in text and "Zhu et al., NeurIPS 2021" in text
    assert "test_hits@10_50: Hits@10 against 50 negatives, eval.hits_negatives_rule=paper (" in text
    assert [p.name for p in plots] == ["plot_model.init.png"]
    assert plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows_csv = write_results_csv(sweep).read_text().splitlines()
    assert len(rows_csv) == 1 + 5 and rows_csv[0].startswith("model.init,train.seed,cell")


def test_paper_lookup_matches_only_the_exact_design_point():
    sig = {"data.name": "fb237_ind_v3", "model.aggregate": "pna", "model.message": 2,
           "model.history": "0", "model.init": 2, "model.readout": "none"}  # fmt: skip
    assert paper_value(sig, "test_hits@10_50") == (0.887, "inductive-table-cmpnn")
    assert paper_value({**sig, "model.init": 1}, "test_hits@10_50") is None
    assert paper_value({"data.name": "wn18rr", "model.family": "rgcn"}, "test_mrr") == (
        0.367, "transductive-table-1")  # fmt: skip


def test_published_peer_values_cover_the_eight_splits_in_order():
    """NBFNet's published inductive Hits@10 of 50 (Zhu et al. 2021), one per GraIL split."""
    assert [peer_values(s, "test_hits@10_50")["NBFNet"] for s in SPLITS] == [
        0.948, 0.905, 0.893, 0.890, 0.834, 0.949, 0.951, 0.960]  # fmt: skip
    assert peer_values("fb237_ind_v1", "test_mrr") == {}
    assert peer_values("wn18rr", "test_hits@10_50") == {}


@pytest.mark.integration
def test_sweep_cli_errors_are_one_line(tmp_path):
    base = [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={tmp_path}"]
    proc = subprocess.run([*base, "-m", "model.aggregate=sum,bad"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "bad value 'bad' for model.aggregate" in proc.stderr
    proc = subprocess.run([*base, "sweep_name=x"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "use it with -m" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sweep_on_a_ray_cluster_survives_a_kill_and_restart(tmp_path):
    """2 x 2 sweep driven on a real `ray start --head` cluster; the driver is killed once the
    first cell has finished; the same command again ends with all four cells, each once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    # Ray 2.60 turns token auth on for a head that finds ~/.ray/auth_token; say it on both sides
    env |= {"RAY_AUTH_MODE": "token", "OMP_NUM_THREADS": "1"}
    head = Head(env)  # its own cluster: stopping it leaves any other Ray on the machine alone
    env["RAY_ADDRESS"] = head.gcs_address
    storage = tmp_path / "storage"
    cmd = [sys.executable, "-m", "cmpnn_dist.train", "-m", "sweep_name=s",
           "model.aggregate=sum,pna", "train.seed=0,1", "train.max_steps=30",
           "checkpoint.every_steps=5", "model.num_layers=2", "model.hidden_dim=16",
           "eval.max_queries=40", f"storage_root={storage}"]  # fmt: skip
    runs = storage / "runs" / "s"
    try:
        first = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.time() + 400
        while time.time() < deadline and not list(runs.glob("*/results.json")):
            assert first.poll() is None, "the sweep ended before any cell finished"
            time.sleep(0.5)
        finished_first = {p.parent.name: p.stat().st_mtime_ns for p in runs.glob("*/results.json")}
        assert finished_first, "no cell finished in time"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        assert len(finished_first) < 4
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["finished"] == 4 and out["errors"] == []
        cells = sorted(p.name for p in runs.iterdir())
        assert len(cells) == 4
        for name in cells:  # every cell trained each step exactly once
            train_steps = logged_train_steps(runs / name)
            assert train_steps == list(range(1, 31)), (name, train_steps)
        for name, mtime in finished_first.items():  # finished cells were not run again
            assert (runs / name / "results.json").stat().st_mtime_ns == mtime
        assert len((storage / "sweeps" / "s" / "results.csv").read_text().splitlines()) == 5
        # the sweep report reads what the real sweep wrote
        report = subprocess.run(
            [sys.executable, "-m", "cmpnn_dist.sweep", str(storage / "sweeps" / "s")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr[-2000:]
        assert "| model.aggregate=sum | 2 |" in report.stdout  # two seeds per point
        assert "| model.aggregate=pna | 2 |" in report.stdout
        assert "eval.hits_negatives_rule=paper (" in report.stdout  # the cells' own label
        assert (storage / "sweeps" / "s" / "report.md").is_file()
    finally:
        head.kill()


@pytest.mark.slow
def test_a_failed_cell_fails_the_sweep_after_the_others_ran(tmp_path):
    """One cell's run folder is held by a live process (the product's lock, in a real child):
    the other cell still runs to the end, and the sweep exits 1 with one line naming the
    failed cell and why, after its result line; once the holder is gone, the same command
    runs that cell alone and exits 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    storage = tmp_path / "storage"
    cmd = [sys.executable, "-m", "cmpnn_dist.train", "-m", "sweep_name=f", "train.seed=0,1",
           *TINY, "cluster.cpus_per_worker=1", f"storage_root={storage}"]  # fmt: skip
    runs = storage / "runs" / "f"
    (runs / "train.seed=1").mkdir(parents=True)
    holder = hold_lock(runs / "train.seed=1")
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("sweep f: 1 of 2 cells failed")]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert f"train.seed=1: cmpnn_dist.storage.errors.StorageError: run folder {runs}" in lines[0]
    assert f"is in use by pid {holder.pid}" in lines[0]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cells"] == 2 and out["finished"] == 1 and len(out["errors"]) == 1
    assert (runs / "train.seed=0" / "results.json").is_file()
    assert not (runs / "train.seed=1" / "results.json").exists()
    finished = (runs / "train.seed=0" / "results.json").stat().st_mtime_ns
    # the holder is gone: the same command takes its lock over and runs that cell alone
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["finished"] == 2 and out["errors"] == []
    assert (runs / "train.seed=0" / "results.json").stat().st_mtime_ns == finished
    assert (runs / "train.seed=1" / "results.json").is_file()


def _wait_for_two_training_cells(runs: Path, alive) -> list[Path]:
    """The run folders of the two cells that first trained 20 steps."""
    deadline = time.time() + 300
    while time.time() < deadline:
        running = [r for r in runs.glob("*") if len(logged_train_steps(r)) >= 20]
        if len(running) == 2:
            return running
        alive()
        time.sleep(0.2)
    raise AssertionError("two cells did not start training in time")


def _assert_stopped(
    result: dict, runs: Path, running: list[Path], log: str, max_steps: int = 300
) -> dict[str, int]:
    """The three-cell sweep ``c`` (``max_steps`` a cell) stopped by a signal while the cells
    ``running`` trained: each checkpointed its last trained step (nothing lost), the third never
    began, and the log has the one line naming them.  Returns cell id -> the step it stopped at."""
    how = signal.Signals(result["stopped_by"]).name
    assert result["finished"] == 0, result
    stopped = result["stopped"]
    assert sorted(stopped) == sorted(r.name for r in running)
    assert result["not_started"] == [c for c in ("train.seed=0", "train.seed=1", "train.seed=2")
                                     if c not in stopped]  # fmt: skip
    for cell, step in stopped.items():
        steps = logged_train_steps(runs / cell)
        assert 20 <= step < max_steps, (cell, step)
        assert steps == list(range(1, step + 1)), (cell, step, steps[-3:])
        newest = max(p.name for p in (runs / cell / "checkpoints").glob("step_*"))
        assert newest == f"step_{step:08d}", (cell, newest)
    (idle,) = result["not_started"]
    assert not (runs / idle / "checkpoints").exists() and logged_train_steps(runs / idle) == []
    lines = [x for x in log.splitlines() if x.startswith(f"sweep c interrupted by {how}")]
    named = ", ".join(f"{c} at step {s}" for c, s in stopped.items())
    assert lines == [
        f"sweep c interrupted by {how}: of 3 cells 2 checkpointed ({named}), 1 not started, "
        "0 finished; the same command continues it"
    ], log[-3000:]
    return stopped


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_running_cells_and_starts_no_other(tmp_path):
    """Three cells, two at a time (half the CPUs each, on a local Ray); a terminal's Ctrl-C
    (SIGINT to the driver's process group) once both running cells have trained 20 steps: the
    sweep exits 130 with one line naming the two cells and the steps they checkpointed; each
    checkpoint is the cell's last trained step (nothing lost); the third cell never began.
    The same command then ends all three, every step trained exactly once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    storage = tmp_path / "storage"
    tiny = [o for o in TINY if not o.startswith(("train.max_steps=", "checkpoint.every_steps="))]
    half = (os.cpu_count() or 2) / 2  # two cells run, the third waits, on any machine
    cmd = [sys.executable, "-m", "cmpnn_dist.train", "-m", "sweep_name=c", "train.seed=0,1,2",
           *tiny, "train.epochs=3", "train.max_steps=300", "checkpoint.every_steps=1000",
           "eval.max_queries=40", f"cluster.cpus_per_worker={half:g}",
           f"storage_root={storage}"]  # fmt: skip
    runs = storage / "runs" / "c"
    first = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:

        def alive() -> None:
            assert first.poll() is None, "the sweep ended before two cells trained"

        running = _wait_for_two_training_cells(runs, alive)
        os.killpg(first.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 130, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["stopped_by"] == signal.SIGINT
    stopped = _assert_stopped(result, runs, running, err)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["finished"] == 3 and out["stopped_by"] is None
    for cell in runs.iterdir():
        assert logged_train_steps(cell) == list(range(1, 301)), cell.name
    for step in stopped.values():  # they went on from the step they stopped at
        assert f"[cmpnn_dist] resuming from step {step}:" in proc.stderr


@pytest.mark.slow
def test_ray_job_stop_checkpoints_a_submitted_sweeps_running_cells(tmp_path):
    """``ray job stop`` sends the driver SIGTERM and SIGKILL ``RAY_JOB_STOP_WAIT_TIME_S``
    later (Ray's default: 3 s); submitted with a longer wait (docs/clusters.md), a sweep on a
    real ``ray start --head`` cluster ends as on Ctrl-C: the running cells checkpoint their
    last step, the third never begins, and the job's log has the sweep's line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    env |= {"RAY_AUTH_MODE": "token", "OMP_NUM_THREADS": "1"}
    head = Head(env)  # two CPUs: two cells at a time
    storage = tmp_path / "storage"
    tiny = [o for o in TINY if not o.startswith(("train.max_steps=", "checkpoint.every_steps="))]
    # cells far longer than the stop takes: `ray job stop` starts a Ray client and reaches the
    # driver seconds later, long enough for a short cell to finish on a busy machine
    max_steps = 100_000
    args = ["-m", "sweep_name=c", "train.seed=0,1,2", *tiny, "train.epochs=1000",
            f"train.max_steps={max_steps}", f"checkpoint.every_steps={max_steps}",
            "eval.max_queries=40", "cluster.cpus_per_worker=1",
            f"storage_root={storage}"]  # fmt: skip
    runs = storage / "runs" / "c"
    try:
        done = head.submit(args, no_wait=True, env_vars={"RAY_JOB_STOP_WAIT_TIME_S": "120"})
        assert done.returncode == 0, done.stderr[-2000:]
        job = re.search(r"raysubmit_\w+", done.stdout + done.stderr).group(0)
        running = _wait_for_two_training_cells(runs, head.check)
        ray_job = ["ray", "job"]
        stop = subprocess.run([*ray_job, "stop", "--address", head.address, job], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert stop.returncode == 0, stop.stderr[-2000:]
        logs = subprocess.run([*ray_job, "logs", "--address", head.address, job], env=env,
                              capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    finally:
        head.kill()
    last = [x for x in logs.splitlines() if x.startswith('{"sweep_dir"')]
    assert last, logs[-3000:]
    result = json.loads(last[-1])
    assert result["stopped_by"] == signal.SIGTERM
    _assert_stopped(result, runs, running, logs, max_steps)
