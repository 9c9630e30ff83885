"""benchmarks/bio_train_speed.py end to end on its ``--small`` graphs: the figures it writes
are consistent with each other, with the paper's hyperparameter table and with the dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bio_train_speed  # noqa: E402

from cmpnn_dist.convert.coverage_split import split_sizes  # noqa: E402


@pytest.mark.parametrize("graph", ["hetionet"])
def test_small_run_writes_consistent_results(tmp_path, graph):
    out = tmp_path / "results"
    argv = ["--small", "--graph", graph, "--steps", "1", "--batch", "16", "--out", str(out)]
    assert bio_train_speed.main([*argv, "--storage-root", str(tmp_path / "storage")]) == 0
    res = json.loads((out / "bio_train_cpu_small.json").read_text())
    r = res["results"][graph]
    assert res["machine"]["cpu_count"] >= 1 and res["machine"]["platform"]
    assert r["commit"] and len(r["loadavg_before"]) == 3 and len(r["loadavg_after"]) == 3
    paper = bio_train_speed.PAPER[graph]
    assert r["config"]["model"]["num_layers"] == paper["model.num_layers"]
    b, run_b = r["paper_batch_size"], r["config"]["train"]["batch_size"]
    assert b == paper["train.batch_size"] and run_b == r["measured_batch_size"] == 16
    assert len(r["step_s"]) == 2 and r["median_step_s"] == r["step_s"][1]
    assert r["queries_per_s"] == pytest.approx(run_b / r["median_step_s"], rel=1e-3)
    d = r["dataset"]
    total = d["train_facts"] + d["valid_facts"] + d["test_facts"]
    assert [d["train_facts"], d["test_facts"], d["valid_facts"]] == list(
        split_sizes(total, (0.8, 0.1, 0.1))
    )
    assert r["steps_per_epoch"] == d["train_facts"] // b
    per_query = b / run_b  # the projection scales the timed step per query
    hours = r["steps_per_epoch"] * r["median_step_s"] * per_query / 3600
    assert r["projected_epoch_hours"] == pytest.approx(hours, abs=0.0006)
    cpu_hours = r["steps_per_epoch"] * r["median_step_cpu_s"] * per_query / 3600
    assert r["projected_epoch_cpu_hours"] == pytest.approx(cpu_hours, abs=0.0006)
    assert d["node_types"] == 11 and d["message_edges"] == 2 * d["train_facts"]
    assert 0 < r["rss_after_data_gb"] <= r["rss_peak_gb"]
    assert all(x == x and x > 0 for x in r["losses"])  # finite, positive BCE
    md = (out / "bio_train_cpu_small.md").read_text()
    assert f"| {graph} (synthetic:hetionet_schema) |" in md and r["commit"] in md
