"""Batch scoring as a Ray job (``python -m cmpnn_dist.predict.batch``).

A real checkpoint (a 20-step run of the default graph, ``python -m cmpnn_dist.train``), real
Ray (``ray.init(num_cpus=2)``; the killed job starts its own in a subprocess), real Parquet.
References: the one-query API (``Predictor.predict``, one call per head) for the rows; an
uninterrupted job for the killed-and-resumed one; the dataset's own node types and facts for
the head sets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cmpnn_dist.predict import Predictor
from tests.helpers.paths import REPO_ROOT as REPO

RTOL = 1e-5  # one forward per query against batches: float noise of the batch size only


def _train(root: Path, *extra: str) -> Path:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable, "-m", "cmpnn_dist.train", "train.max_steps=20", "train.progress=false",
        "eval.max_queries=32", f"storage_root={root}", "run_name=b", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "runs" / "b"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("batch"))


@pytest.fixture(scope="module")
def predictor(run_dir) -> Predictor:
    return Predictor.from_checkpoint(run_dir, device="cpu")


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _job(*args: str) -> tuple[int, dict | None, str]:
    """The command in this process: (exit status, its JSON result, stderr)."""
    import contextlib
    import io

    from cmpnn_dist.cli.batch import _main
    from cmpnn_dist.cli.common import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = run_cli(_main, ["progress=false", *args])
    lines = out.getvalue().strip().splitlines()
    return status, (json.loads(lines[-1]) if status == 0 else None), err.getvalue()


def _rows(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out)


def _reference(predictor, heads: list[str], relation: str, k: int, known: str) -> pd.DataFrame:
    frames = [predictor.predict(head=h, relation=relation, topk=k, known=known) for h in heads]
    return pd.concat(frames, ignore_index=True)


def _assert_same_rows(got: pd.DataFrame, ref: pd.DataFrame, predictor) -> None:
    """The batch job's rows are the one-query API's: the same ranks and scores, and the same
    tails in the same order, except among tails whose scores tie within the float noise (the
    two paths score in batches of other shapes): there either may keep another member of the
    tied set, even at the top-k cut, so a tail that differs must score, in the API's ranking
    of every tail, within the noise of its row's score."""
    assert len(got) == len(ref)
    got = got.reset_index(drop=True)
    for col in ("head", "relation", "head_id", "rank"):
        assert got[col].tolist() == ref[col].tolist(), col
    np.testing.assert_allclose(got["score"], ref["score"], rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(got["probability"], ref["probability"], rtol=RTOL, atol=RTOL)
    for i in np.flatnonzero(got["tail"].to_numpy() != ref["tail"].to_numpy()):
        every = _reference(predictor, [got["head"][i]], got["relation"][i], 10**9, "flag")
        same = every[every["tail"] == got["tail"][i]]
        assert len(same) == 1 and abs(same["score"].iloc[0] - got["score"][i]) < RTOL, i
    ok = got["tail"].to_numpy() == ref["tail"].to_numpy()
    assert got["known"][ok].tolist() == ref["known"][ok].tolist()
    assert (got["tail_id"][ok] == ref["tail_id"][ok]).all()


@pytest.mark.integration
def test_rows_equal_the_one_query_api(ray_local, run_dir, predictor, tmp_path):
    names = predictor.entities.names
    heads = [n for n in names if n.startswith("A::")][::13][:24]
    file = tmp_path / "heads.txt"
    file.write_text("# heads\n" + "\n".join([*heads, heads[0], ""]) + "\n")  # a repeat: once
    for known, k in (("flag", 5), ("filter", 7)):
        out = tmp_path / f"out_{known}"
        status, res, err = _job(
            f"ckpt={run_dir}", "relation=t0", f"heads=file:{file}", f"top_k={k}", f"out={out}",
            f"known={known}", "part_size=5", "batch_size=4", "cluster.num_workers=2",
        )  # fmt: skip
        assert status == 0, err[-3000:]
        assert res["num_queries"] == len(heads) and res["parts_written"] == 5
        assert sorted(p.name for p in out.glob("part-*.parquet")) == [
            f"part-{i:05d}.parquet" for i in range(5)
        ]
        got = _rows(out)
        _assert_same_rows(got, _reference(predictor, heads, "t0", k, known), predictor)
        if known == "filter":
            assert (got["known"] == "").all()
        else:
            assert set(got["known"]) <= {"", "train", "valid", "test"}
        assert "queries/s" in err.strip().splitlines()[-1]


@pytest.mark.integration
def test_head_sets_all_and_type(ray_local, run_dir, predictor, tmp_path):
    """``heads=all`` are the entities of t0's head types in the training facts (type A, from
    the stored facts), ``type:C`` every C; ``top_k=all`` every candidate (t0's tails: C)."""
    gd = predictor.dataset.graph_data("train")
    types = gd.node_types.numpy()
    train = gd.facts("train").numpy()
    t0 = predictor.relations.ids["t0"]
    head_types = set(types[train[train[:, 1] == t0, 0]].tolist())
    expected = [v for v in range(len(types)) if types[v] in head_types]
    status, res, err = _job(
        f"ckpt={run_dir}", "relation=t0", "heads=all", "top_k=2", f"out={tmp_path / 'a'}",
        "part_size=128", "batch_size=32",
    )  # fmt: skip
    assert status == 0, err[-3000:]
    got = _rows(tmp_path / "a")
    assert got["head_id"].drop_duplicates().tolist() == expected
    assert len(got) == 2 * len(expected) and res["workers"] == 1
    c_ids = [v for v in range(len(types)) if gd.node_type_names[types[v]] == "C"]
    status, _, err = _job(
        f"ckpt={run_dir}", "relation=t0", "heads=type:C", "top_k=all",
        f"out={tmp_path / 'c'}", "part_size=256", "batch_size=64",
    )  # fmt: skip
    assert status == 0, err[-3000:]
    got = _rows(tmp_path / "c")
    assert got["head_id"].drop_duplicates().tolist() == c_ids
    per_head = got.groupby("head_id")["tail_id"].apply(sorted)
    assert all(tails == c_ids for tails in per_head)  # every C x C pair, each once
    ref = _reference(predictor, [predictor.entities.names[c_ids[0]]], "t0", len(c_ids), "flag")
    _assert_same_rows(got[got["head_id"] == c_ids[0]], ref, predictor)


@pytest.mark.integration
def test_killed_job_resumes_without_duplicates(ray_local, run_dir, tmp_path):
    """SIGKILL the job (its own process and Ray) once some parts exist; the same command
    again keeps those parts untouched, writes the rest, and the rows are exactly those of an
    uninterrupted job."""
    out = tmp_path / "killed"
    args = [
        f"ckpt={run_dir}", "relation=t1", "heads=all", "top_k=3", f"out={out}",
        "part_size=4", "batch_size=4", "progress=false",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cmpnn_dist.predict.batch", *args], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not list(out.glob("part-*.parquet")) and proc.poll() is None:
            assert time.monotonic() < deadline, "no part within 600 s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        log.close()
    assert "Token authentication" not in (tmp_path / "killed.log").read_text()  # ray_logs.py
    before = {p.name: p.stat().st_ino for p in out.glob("part-*.parquet")}
    num_parts = json.loads((out / "_job.json").read_text())["num_parts"]
    assert 0 < len(before) < num_parts, (len(before), (tmp_path / "killed.log").read_text()[-2000:])

    status, res, err = _job(*args, "cluster.num_workers=2")
    assert status == 0, err[-3000:]
    assert res["parts_skipped"] == len(before) and res["parts_written"] == num_parts - len(before)
    after = {p.name: p.stat().st_ino for p in out.glob("part-*.parquet")}
    assert all(after[name] == ino for name, ino in before.items())  # kept, not rewritten
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp file left

    status, _, err = _job(*[a.replace(str(out), str(tmp_path / "whole")) for a in args])
    assert status == 0, err[-3000:]
    resumed, whole = _rows(out), _rows(tmp_path / "whole")
    assert not resumed.duplicated(["head_id", "rank"]).any()
    pd.testing.assert_frame_equal(
        resumed.drop(columns=["score", "probability"]),
        whole.drop(columns=["score", "probability"]),
    )
    np.testing.assert_allclose(resumed["score"], whole["score"], rtol=RTOL, atol=RTOL)

    status, res, _ = _job(*args)  # finished: nothing to do, nothing rewritten
    assert status == 0 and res["parts_written"] == 0 and res["scored_queries"] == 0


@pytest.mark.integration
def test_bad_inputs_are_one_line_and_write_nothing(run_dir, tmp_path):
    heads = tmp_path / "h.txt"
    heads.write_text("A::3\nA::40\nA::4O\n")
    base = [f"ckpt={run_dir}", "relation=t0", "heads=type:A", "top_k=3"]
    cases = [
        (["relation=t9"], "unknown relation 't9'"),
        (["heads=type:Q"], "heads=type:Q: unknown node type 'Q'"),
        ([f"heads=file:{heads}"], f"unknown entity 'A::4O' ({heads}:3); closest:"),
        ([f"heads=file:{tmp_path / 'none.txt'}"], f"heads=file:{tmp_path / 'none.txt'}"),
        (["heads=some"], "heads='some': use heads=all"),
        (["top_k=0"], "top_k=0: must be >= 1"),
        (["known=drop"], "known='drop'"),
        ([f"ckpt={tmp_path / 'nothing'}"], str(tmp_path / "nothing")),
    ]
    for i, (change, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        keys = {a.split("=", 1)[0] for a in change}
        args = [a for a in base if a.split("=", 1)[0] not in keys] + change + [f"out={out}"]
        status, _, err = _job(*args)
        lines = err.strip().splitlines()
        assert status == 2 and lines[-1].startswith("error: "), (change, err[-2000:])
        assert message in lines[-1], (change, lines[-1])
        assert not [ln for ln in lines if ln.startswith("Traceback")]
        assert not out.exists(), change

    # out= holding another job: one line naming the differing parameter, nothing changed
    other = tmp_path / "other"
    other.mkdir()
    manifest = {"format": 1, "checkpoint": "x", "top_k": 9}
    (other / "_job.json").write_text(json.dumps(manifest))
    status, _, err = _job(*base, f"out={other}")
    assert status == 2 and "holds a job with other parameters (checkpoint:" in err
    assert sorted(p.name for p in other.iterdir()) == ["_job.json"]
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    status, _, err = _job(*base, f"out={stray}")
    assert status == 2 and "not a batch-scoring output" in err.strip().splitlines()[-1]


@pytest.mark.integration
def test_pruned_checkpoint_scores_with_its_own_budget(ray_local, tmp_path_factory, tmp_path):
    """A pruned model (node_ratio 0.05: 50 of 1,000 nodes send per layer) scores through its
    own configuration: the rows equal its one-query API's, and differ from what the same
    weights give densely (the budget is in effect)."""
    run = _train(
        tmp_path_factory.mktemp("pruned"), "model.propagation=pruned",
        "model.prune.node_ratio=0.05",
    )  # fmt: skip
    p = Predictor.from_checkpoint(run, device="cpu")
    heads = [n for n in p.entities.names if n.startswith("A::")][:12]
    file = tmp_path / "h.txt"
    file.write_text("\n".join(heads) + "\n")
    status, res, err = _job(
        f"ckpt={run}", "relation=t0", f"heads=file:{file}", "top_k=6", f"out={tmp_path / 'p'}",
        "part_size=6", "batch_size=3",
    )  # fmt: skip
    assert status == 0, err[-3000:]
    assert "pruned 4 x 32 model" in err.strip().splitlines()[-1]
    got = _rows(tmp_path / "p")
    _assert_same_rows(got, _reference(p, heads, "t0", 6, "flag"), p)
    dense = Predictor.from_checkpoint(run, ["model.propagation=dense"], device="cpu")
    ref_dense = _reference(dense, heads, "t0", 6, "flag")
    assert not np.allclose(got["score"], ref_dense["score"], rtol=1e-3, atol=1e-3)
