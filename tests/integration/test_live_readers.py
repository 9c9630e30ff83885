"""Readers never harm a running job, and a running job never fails a reader.

A real training run through the CLI (``python -m cmpnn_dist.train``, a 40-entity rule-planted
graph, 6 epochs of 8 steps) checkpoints every step with ``checkpoint.keep_last=1`` -- so the
newest checkpoint is pruned one step after it appears -- and replaces ``best`` slowly:
``CMPNN_FAULT_BEST_DELAY_S`` holds each replacement with the new copy staged, then again with
the old ``best`` moved aside and the new one not in place.  While it trains, readers run in
loops against it: ``python -m cmpnn_dist.predict`` on the run folder beside
``python -m cmpnn_dist.evaluate`` on ``checkpoints/best`` (one process per read), and a
process reading through the Python predict API (tests/helpers/live_readers.py) on both, which reads
``best`` as soon as it sees the writer inside either window (it is started, imports done,
before the writer, so it is reading while the writer trains).

Asserted: every read succeeds and prints at most one fallback line; the API reader lands in
the half-published window at least once, falls back there with one line naming the
checkpoint it used, and attempts no change inside the run folder (an audit hook); the writer
exits 0 without a traceback; and its results, ``metrics.csv`` (wall-clock column aside), last
checkpoint and ``best`` equal those of a straight run of the same command without readers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE

import pytest
import torch

from cmpnn_dist.runs.checkpoint import load_checkpoint, read_manifest
from tests.helpers.paths import REPO_ROOT as REPO
from tests.helpers.real_run import history

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests

DELAY_S = "1.0"
ARGS = [
    "run_name=live",
    "data.name=rk40",
    "+data.synthetic.num_entities=40",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "ops.impl=reference",
    "train.batch_size=32",
    "train.epochs=6",
    "train.num_negatives=8",
    "train.deterministic=true",
    "train.device=cpu",
    "train.num_threads=1",
    "train.progress=false",
    "checkpoint.every_steps=1",
    "checkpoint.keep_last=1",
    "eval.batch_size=64",
]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _train(root: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}", *ARGS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(**env),
    )  # fmt: skip


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.02)


def test_readers_in_a_loop_beside_a_run_that_prunes_and_republishes_best(tmp_path):
    straight_root, live_root = tmp_path / "straight", tmp_path / "live"
    run = live_root / "runs" / "live"
    best = run / "checkpoints" / "best"
    stop = tmp_path / "stop"
    api = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "helpers" / "live_readers.py"), str(run), str(stop)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    assert api.stdout is not None and api.stdout.readline().strip() == "ready"
    straight = _train(straight_root)
    writer = _train(live_root, CMPNN_FAULT_BEST_DELAY_S=DELAY_S)
    _wait_for(best / "manifest.json", writer)  # the command-line readers need a best too
    cli_reads = []
    while writer.poll() is None:  # predict on the run folder and evaluate on best, side by side
        cmds = [
            ["cmpnn_dist.predict", f"ckpt={run}", "head=A::0", "relation=t0", "topk=3"],
            ["cmpnn_dist.evaluate", f"ckpt={best}"],
        ]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", *c], stdout=PIPE, stderr=PIPE, text=True, env=_env()
            )
            for c in cmds
        ]
        for cmd, proc in zip(cmds, procs, strict=True):
            _, proc_err = proc.communicate(timeout=300)
            cli_reads.append(cmd[0])
            assert proc.returncode == 0, f"{cmd}: {proc_err[-3000:]}"
            assert "Traceback" not in proc_err
            assert sum("instead" in line for line in proc_err.splitlines()) <= 1
    stop.touch()
    out, err = api.communicate(timeout=120)
    w_out, w_err = writer.communicate()
    s_out, s_err = straight.communicate(timeout=300)

    # the writer: no failure, whatever the readers did
    assert writer.returncode == 0, w_err[-3000:]
    assert "Traceback" not in w_err and "FileNotFoundError" not in w_err
    assert straight.returncode == 0, s_err[-3000:]
    # the readers: no failure, one line per fallback, nothing changed in the run folder
    assert api.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["failures"] == []
    assert summary["touched"] == []
    assert summary["reads"] >= 3 and len(cli_reads) >= 2
    assert all(len(f["lines"]) == 1 for f in summary["fallbacks"]), summary["fallbacks"]
    half = [f for f in summary["fallbacks"] if f["window"] == 2 and f["target"] == str(best)]
    assert half, f"no read of best landed while it was being replaced: {summary}"
    line = half[0]["lines"][0]
    assert line.startswith(f"{best} is being replaced by its run")
    assert f"using {run}/checkpoints/step_" in line and line.endswith(" instead")
    assert not any(p.name.startswith((".tmp-best-", ".old-best-")) for p in best.parent.iterdir())

    # the run's results equal the straight run's
    ref_run = straight_root / "runs" / "live"
    mine = json.loads(w_out.strip().splitlines()[-1])
    ref = json.loads(s_out.strip().splitlines()[-1])
    assert mine["valid"] == ref["valid"] and mine["test"] == ref["test"]
    assert history(run) == history(ref_run)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (ref_run / "checkpoints").iterdir())
    assert names == ["best", "step_00000048"]
    for name in names:
        ours = load_checkpoint(run / "checkpoints" / name)
        theirs = load_checkpoint(ref_run / "checkpoints" / name)
        assert ours["step"] == theirs["step"]
        for key, value in theirs["model"].items():
            assert torch.equal(ours["model"][key], value), (name, key)
    assert read_manifest(best)["meta"] == read_manifest(ref_run / "checkpoints" / "best")["meta"]
