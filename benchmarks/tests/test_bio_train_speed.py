"""benchmarks/step/bio_train_speed.py end to end on its ``--small`` graphs: the figures it writes
are consistent with each other, with the paper's hyperparameter table and with the dataset."""

from __future__ import annotations

import json

import pytest

from benchmarks.step import bio_train_speed
from cmpnn_dist.convert.coverage_split import split_sizes


@pytest.mark.integration
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


class FakeClock:
    """``bio_train_speed``'s ``time`` module with wall and CPU clocks that stand still except
    when a training step advances them by a fixed amount."""

    def __init__(self, start: float) -> None:
        self.wall, self.cpu = start, 0.0

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu

    def __getattr__(self, name: str):
        import time

        return getattr(time, name)


def test_projected_hours_from_fixed_timings(tmp_path, monkeypatch):
    """Steps that take 2, 3 and 5 s wall (1, 1.5 and 3.5 s CPU), the first one warm-up: the
    median step is 4 s wall, 2.5 s CPU, at 16 queries.  The --small Hetionet-schema graph has
    F = 3,599 training facts and the paper's batch is B = 64, so one epoch is F // B = 56
    steps of 64 queries = 3,584 queries: 3,584 x 4 / 16 = 896 s = 0.249 h wall, 3,584 x 2.5 /
    16 = 560 s = 0.156 h CPU; 16 / 4 = 4 queries/s."""
    from cmpnn_dist.training.trainer import Trainer

    clock = FakeClock(bio_train_speed.START)
    monkeypatch.setattr(bio_train_speed, "time", clock)
    timings = iter([(2.0, 1.0), (3.0, 1.5), (5.0, 3.5)])
    real_step = Trainer.train_step

    def timed_step(self, model):
        loss = real_step(self, model)
        wall, cpu = next(timings)
        clock.wall += wall
        clock.cpu += cpu
        return loss

    monkeypatch.setattr(Trainer, "train_step", timed_step)
    out = tmp_path / "results"
    argv = ["--small", "--graph", "hetionet", "--steps", "2", "--batch", "16", "--out", str(out)]
    assert bio_train_speed.main([*argv, "--storage-root", str(tmp_path / "storage")]) == 0
    r = json.loads((out / "bio_train_cpu_small.json").read_text())["results"]["hetionet"]
    assert r["dataset"]["train_facts"] == 3_599 and r["paper_batch_size"] == 64
    assert r["step_s"] == [2.0, 3.0, 5.0] and r["step_cpu_s"] == [1.0, 1.5, 3.5]
    assert r["median_step_s"] == 4.0 and r["median_step_cpu_s"] == 2.5
    assert r["steps_per_epoch"] == 56
    assert r["queries_per_s"] == 4.0
    assert r["projected_epoch_hours"] == 0.249  # 896 s
    assert r["projected_epoch_cpu_hours"] == 0.156  # 560 s
