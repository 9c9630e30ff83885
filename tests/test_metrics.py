"""Metric functions against hand-computed ranks (ties, filtering) and Hits@10 with 50 negatives."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest
import torch

from cmpnn_dist.evaluation import filtered_rank, hits_at_k_with_negatives, ranking_metrics


def test_filtered_rank_hand_example_with_ties_and_filter():
    scores = torch.tensor(
        [
            [0.5, 0.9, 0.5, 0.1, 0.7],  # target 0; 1 filtered; 2 ties; 4 beats -> rank 3
            [0.2, 0.2, 0.2, 0.2, 0.2],  # target 3, all tied, none filtered -> rank 5 (pessimistic)
            [0.9, 0.1, 0.3, 0.8, 0.0],  # target 0 best; 3 filtered -> rank 1
            [0.1, 0.9, 0.8, 0.7, 0.6],  # target 0 worst; everything else filtered -> rank 1
        ]
    )
    target = torch.tensor([0, 3, 0, 0])
    mask = torch.tensor(
        [
            [False, True, False, False, False],
            [False, False, False, False, False],
            [True, False, False, True, False],  # the target's own flag is ignored
            [False, True, True, True, True],
        ]
    )
    rank, cands = filtered_rank(scores, target, mask)
    assert rank.tolist() == [3, 5, 1, 1]
    assert cands.tolist() == [3, 4, 3, 0]
    assert rank.dtype == cands.dtype == torch.int64


def test_filtered_rank_rejects_bad_shapes():
    with pytest.raises(ValueError, match="filter_mask"):
        filtered_rank(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), torch.zeros(2, 4).bool())


def _hits_by_hand(rank: int, num: int, n: int = 50) -> float:
    p = Fraction(rank - 1, num)
    return float(sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(10)))


def test_hits_at_10_with_50_negatives_by_hand():
    ranks = torch.tensor([1, 2, 11, 30, 101, 7])
    nums = torch.tensor([100, 100, 100, 200, 100, 40])
    got = hits_at_k_with_negatives(ranks, nums)
    want = [_hits_by_hand(int(r), int(n)) for r, n in zip(ranks, nums, strict=True)]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert got[0] == 1.0  # nothing beats the target
    assert got[4] == 0.0  # everything beats it


def test_ranking_metrics_hand_values():
    ranks = torch.tensor([1, 2, 4, 20])
    nums = torch.tensor([50, 50, 50, 50])
    m = ranking_metrics(ranks, nums)
    assert m["mr"] == pytest.approx((1 + 2 + 4 + 20) / 4)
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 20) / 4)
    assert m["hits@1"] == pytest.approx(0.25)
    assert m["hits@3"] == pytest.approx(0.5)
    assert m["hits@10"] == pytest.approx(0.75)
    want = sum(_hits_by_hand(int(r), 50) for r in ranks) / 4
    assert m["hits@10_50"] == pytest.approx(want)
    assert set(m) == {"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50"}
