"""``python -m cmpnn_dist.evaluate`` on 2 Ray workers (real gloo) equals the one-process run
rank for rank, for the filtered and the typed protocol."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cmpnn_dist.config import Config

pytestmark = pytest.mark.slow  # ~1 min: Ray start, two worker groups


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from cmpnn_dist.convert import build_dataset
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.loop import fit

    root = tmp_path_factory.mktemp("storage")
    build_dataset(
        "synthetic:rule_kg",
        root / "datasets" / "tiny",
        synthetic={"num_entities": 60},
        num_shards=2,
        name="tiny",
    )
    cfg = Config()
    cfg.storage_root = str(root)
    cfg.run_name = "tiny-run"
    cfg.data.name = "tiny"
    cfg.model.num_layers = 2
    cfg.model.hidden_dim = 8
    cfg.model.decoder_hidden_dim = 8
    cfg.ops.impl = "reference"
    cfg.train.batch_size = 4
    cfg.train.max_steps = 6
    cfg.train.device = "cpu"
    cfg.train.progress = False
    data = load_train_data(open_dataset(root / "datasets" / "tiny"))
    out = fit(cfg, data, run_dir=root / "runs" / "tiny-run")
    return Path(out.run_dir)


@pytest.mark.parametrize("protocol", ["all", "typed"])
def test_two_ray_workers_equal_one_process_rank_for_rank(run_dir, protocol):
    from cmpnn_dist.cli.evaluate import evaluate_checkpoint

    opts = [f"eval.protocol={protocol}", "eval.ties=average", "eval.batch_size=3"]
    run_results = (run_dir / "results.json").read_bytes()
    local = evaluate_checkpoint(run_dir, opts)
    here = Path(local["evaluation_dir"])  # each evaluation's own folder under the run
    tables = {s: pq.read_table(here / f"ranks_{s}_{protocol}.parquet") for s in ("valid", "test")}
    two = evaluate_checkpoint(
        run_dir, [*opts, "cluster.num_workers=2", "cluster.cpus_per_worker=1"]
    )
    assert two["world_size"] == 2
    there = Path(two["evaluation_dir"])
    # the same evaluation (weights, protocol, budget): its folder, replaced whole
    assert there == here and here.parent == run_dir / "evaluations"
    for split in ("valid", "test"):
        again = pq.read_table(there / f"ranks_{split}_{protocol}.parquet")
        assert again.num_rows == tables[split].num_rows == local[split]["num_queries"] > 0
        assert again.equals(tables[split]), split  # every row: fact, direction, rank, candidates
        assert two[split] == local[split]
        assert local[split]["protocol"] == protocol and local[split]["ties"] == "average"
    assert (there / "results.json").is_file()
    assert (run_dir / "results.json").read_bytes() == run_results  # the run's own, untouched
