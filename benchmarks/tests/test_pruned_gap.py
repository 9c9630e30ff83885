"""benchmarks/studies/pruned_gap.py: the hop horizon against a BFS by hand, and the split of a run's
Hits@10_50 into answers within / beyond it (the two shares add up to the total)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from benchmarks.studies import pruned_gap
from cmpnn_dist.evaluation.metrics import hits_at_k_with_negatives


def test_within_hops_is_a_bfs_to_that_depth():
    # a directed path 0 -> 1 -> 2 -> 3 -> 4, an edge 5 -> 0 (not reachable from 0), 6 isolated
    src, dst = np.array([0, 1, 2, 3, 5]), np.array([1, 2, 3, 4, 0])
    seen = pruned_gap.within_hops(src, dst, 7, np.array([0, 5, 6]), hops=2)
    assert seen[0].nonzero()[0].tolist() == [0, 1, 2]
    assert seen[1].nonzero()[0].tolist() == [0, 1, 5]
    assert seen[2].nonzero()[0].tolist() == [6]
    assert pruned_gap.within_hops(src, dst, 7, np.array([0]), hops=4)[0, 4]


def test_split_run_shares_add_up(tmp_path):
    ranks = [1.0, 30.0, 900.0, 2.0]
    table = {
        "head": [0, 1, 2, 3],
        "relation": [0, 0, 1, 1],
        "tail": [4, 5, 6, 7],
        "direction": ["tail", "tail", "head", "head"],
        "rank": ranks,
        "candidates": [1000] * 4,
    }
    pq.write_table(pa.table(table), tmp_path / "ranks_test_all.parquet")
    # direction "head": the source is the tail
    reach = {(0, 4): True, (1, 5): False, (6, 2): True, (7, 3): False}
    r = pruned_gap.split_run(tmp_path, reach)
    want = hits_at_k_with_negatives(torch.tensor(ranks), torch.tensor([1000] * 4)).numpy()
    assert r["reachable"] == 2
    assert np.isclose(r["hits"], want.mean())
    assert np.isclose(r["hits_reachable"], want[[0, 2]].mean())
    assert np.isclose(r["hits_beyond"], want[[1, 3]].mean())
    assert np.isclose(r["contrib_reachable"] + r["contrib_beyond"], r["hits"])
