"""``benchmarks/cluster/chaos.py``: a Ray training (2 workers) under random SIGKILLs of its driver,
its workers and its Ray system processes, with readers looping beside it, ends as a straight run.

The slow test runs the script at a tiny scale (a few kills) and checks its verdict against the
run folders it leaves: ``results.json``, every ``metrics.csv`` row (wall clock aside) and the
weights of ``best`` and of the last checkpoint of the chaos run equal those of the straight
run, and no reader failed.  The fast test checks how victims are found: only the driver and
its descendants, never a process of another Ray cluster on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from benchmarks.cluster import chaos
from cmpnn_dist.runs.checkpoint import load_checkpoint
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.real_run import history


@pytest.mark.integration
def test_victims_are_the_driver_and_its_descendants_only(tmp_path):
    # a real process tree named like a run's: the "driver" starts a "gcs_server" and a
    # "raylet" that starts a "ray::RayTrainWorker"; beside it, a "ray::RayTrainWorker" of
    # another cluster (not a descendant of the driver)
    (tmp_path / "raylet.sh").write_text("(exec -a ray::RayTrainWorker sleep 120) &\nwait\n")
    (tmp_path / "driver.sh").write_text(
        '(exec -a "/x/ray/gcs/gcs_server --log_dir=/tmp" sleep 120) &\n'
        f'(exec -a "/x/ray/raylet/raylet --node" bash {tmp_path / "raylet.sh"}) &\n'
        "wait\n"
    )
    driver = subprocess.Popen(["bash", str(tmp_path / "driver.sh")], start_new_session=True)
    other = subprocess.Popen(["bash", "-c", "exec -a ray::RayTrainWorker sleep 120"])
    try:
        deadline, found = time.monotonic() + 30, {}
        while time.monotonic() < deadline:
            found = chaos.candidates(driver.pid)
            if len(found.get("ray_system", [])) == 2 and found.get("train_worker"):
                break
            time.sleep(0.1)
        assert [pid for pid, _, _ in found["driver"]] == [driver.pid]
        assert sorted(kind for _, kind, _ in found["ray_system"]) == ["gcs_server", "raylet"]
        workers = [(pid, kind) for pid, kind, _ in found["train_worker"]]
        assert len(workers) == 1 and workers[0][1] == "train_worker"
        assert workers[0][0] not in (other.pid, driver.pid)
        other_as_driver = chaos.candidates(other.pid)
        assert set(other_as_driver) == {"driver"}  # nothing below it
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver's own session: only its tree
        other.kill()
        driver.wait()
        other.wait()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_chaos_run_finishes_identical_to_a_straight_run(tmp_path):
    work, out = tmp_path / "work", tmp_path / "chaos_tiny"
    # --interval 0.5: a fault comes within a second of each new checkpoint (it waits for one
    # newer than the previous fault's), so both come long before the run's 30th step however
    # fast the machine; the first failed attempt's newest checkpoint is then corrupted
    argv = ["--steps", "30", "--every-steps", "3", "--faults", "2", "--interval", "0.5",
            "--corrupt-once", "--max-failures", "0", "--seed", "1", "--readers", "1",
            "--nice", "0",  # the training at pytest's nice
            "--work", str(work), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cluster.chaos", *argv],
        cwd=REPO, capture_output=True, text=True, timeout=3500,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    res = json.loads(out.with_suffix(".json").read_text())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert res["ok"] and res["finished"] and res["identical"]
    print(json.dumps(res["fault_log"], indent=1))
    kills = [f for f in res["fault_log"] if f["class"] != "checkpoint"]
    corrupt = [f for f in res["fault_log"] if f["class"] == "checkpoint"]
    assert len(kills) == 2 and res["faults"] == len(res["fault_log"])
    assert {f["class"] for f in kills} <= {"driver", "train_worker", "ray_system"}
    # the newest checkpoint, corrupted between a failed attempt and its restart (once there
    # were two), is skipped by the restart, which resumes from an older one, not from step 0
    assert len(corrupt) <= 1
    for c in corrupt:
        after = next(a for a in res["attempts"][c["attempt"] :] if a["resumes_from"])
        name = f"step_{c['newest_checkpoint']:08d}"
        assert 0 < after["resumes_from"][0] < c["newest_checkpoint"], after
        assert name in " ".join(after["skipped"]), after
    assert res["reader_failures"] == [] and res["reads"].get("ok", 0) >= 1
    assert res["attempts"][-1]["exit"] == 0
    assert out.with_suffix(".md").read_text().startswith("# Chaos run")

    # the verdict, checked again from the run folders themselves
    ref, run = work / "straight" / "runs" / "chaos", work / "chaos" / "runs" / "chaos"
    mine, theirs = (json.loads((r / "results.json").read_text()) for r in (run, ref))
    assert mine["valid"] == theirs["valid"] and mine["test"] == theirs["test"]
    rows = history(ref)
    assert history(run) == rows and sum(r["kind"] == "train" for r in rows) == 30
    for name in ("best", "step_00000030"):
        ours = load_checkpoint(run / "checkpoints" / name)
        reference = load_checkpoint(ref / "checkpoints" / name)
        assert ours["step"] == reference["step"]
        for key, value in reference["model"].items():
            assert torch.equal(ours["model"][key], value), (name, key)
