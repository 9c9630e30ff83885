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


def _hits_by_hand(rank: int, num: int, n: int = 49) -> float:
    """sum_{i<10} C(n, i) p^i (1-p)^(n-i) in exact fractions; n = the number of negatives."""
    p = Fraction(rank - 1, num)
    return float(sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(10)))


@pytest.mark.parametrize("rule, negatives", [("torchdrug", 49), ("n_negatives", 50)])
def test_hits_at_10_with_50_negatives_by_hand(rule, negatives):
    ranks = torch.tensor([1, 2, 11, 30, 101, 7])
    nums = torch.tensor([100, 100, 100, 200, 100, 40])
    got = hits_at_k_with_negatives(ranks, nums, rule=rule)
    want = [_hits_by_hand(int(r), int(n), negatives) for r, n in zip(ranks, nums, strict=True)]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    assert got[0] == 1.0  # nothing beats the target
    assert got[4] == 0.0  # everything beats it


def test_the_two_rules_at_p_one_fifth():
    """The issue's example, p = 0.2: 0.444 with 50 negatives, 0.472 with 49 (TorchDrug's
    50 samples, one of them the positive); the default is TorchDrug's."""
    rank, num = torch.tensor([21]), torch.tensor([100])
    ours = float(hits_at_k_with_negatives(rank, num, rule="n_negatives")[0])
    paper = float(hits_at_k_with_negatives(rank, num)[0])
    assert round(ours, 3) == 0.444 and round(paper, 3) == 0.472
    assert paper == pytest.approx(_hits_by_hand(21, 100, 49), abs=1e-12)
    with pytest.raises(ValueError, match="hits_negatives_rule"):
        hits_at_k_with_negatives(rank, num, rule="50")


@pytest.mark.parametrize("rule, negatives", [("torchdrug", 49), ("n_negatives", 50)])
def test_hits_at_10_of_50_equals_sampling_negatives(rule, negatives):
    """Monte Carlo oracle, independent of the closed form: score every candidate, drop the
    filtered ones, draw ``negatives`` of the rest (with replacement, uniformly) per trial,
    and count a hit when fewer than 10 of them score at least the target (the pessimistic
    tie rule of the ranks).  TorchDrug's rule draws 49 negatives beside the positive (50
    samples in all); ours drew 50.  The closed form must fall within 5 standard errors of
    the sampled rate, and the other rule's closed form must not (at p ~ 0.2 they differ by
    0.028, 20 standard errors of 150,000 trials)."""
    gen = torch.Generator().manual_seed(0)
    trials, num_nodes = 150_000, 300
    other = "n_negatives" if rule == "torchdrug" else "torchdrug"
    for want_p in (0.02, 0.1, 0.2, 0.3):
        scores = torch.randn(num_nodes, generator=gen)
        scores[17] = scores[23]  # a tie, counted against the target when 17 is the target
        filtered = torch.rand(num_nodes, generator=gen) < 0.1
        order = torch.argsort(scores, descending=True)
        target = int(order[int(want_p * num_nodes)])
        filtered[target] = False
        negative = ~filtered
        negative[target] = False
        pool = scores[negative]  # the candidates a negative is drawn from
        draws = torch.randint(len(pool), (trials, negatives), generator=gen)
        beats = (pool[draws] >= scores[target]).sum(1)
        rate = float((beats < 10).double().mean())
        stderr = max((rate * (1 - rate) / trials) ** 0.5, 1e-4)
        rank, num = filtered_rank(scores[None], torch.tensor([target]), filtered[None])
        closed = float(hits_at_k_with_negatives(rank, num, rule=rule)[0])
        assert abs(closed - rate) < 5 * stderr, (want_p, closed, rate)
        if want_p == 0.2:
            wrong = float(hits_at_k_with_negatives(rank, num, rule=other)[0])
            assert abs(wrong - rate) > 15 * stderr, (wrong, rate)


def test_ranking_metrics_hand_values():
    ranks = torch.tensor([1, 2, 4, 20])
    nums = torch.tensor([50, 50, 50, 50])
    m = ranking_metrics(ranks, nums)
    assert m["mr"] == pytest.approx((1 + 2 + 4 + 20) / 4)
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 20) / 4)
    assert m["hits@1"] == pytest.approx(0.25)
    assert m["hits@3"] == pytest.approx(0.5)
    assert m["hits@10"] == pytest.approx(0.75)
    want = sum(_hits_by_hand(int(r), 50, 49) for r in ranks) / 4
    assert m["hits@10_50"] == pytest.approx(want)
    assert set(m) == {"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50"}
    strict = ranking_metrics(ranks, nums, hits_negatives_rule="n_negatives")["hits@10_50"]
    assert strict == pytest.approx(sum(_hits_by_hand(int(r), 50, 50) for r in ranks) / 4)
    assert strict < m["hits@10_50"]


def test_the_rule_is_the_config_key_eval_hits_negatives_rule():
    from cmpnn_dist.cli import UsageError, compose_config

    assert compose_config("fb237_ind_v1", []).eval.hits_negatives_rule == "torchdrug"
    cfg = compose_config("default", ["eval.hits_negatives_rule=n_negatives"])
    assert cfg.eval.hits_negatives_rule == "n_negatives"
    with pytest.raises(UsageError, match=r"eval\.hits_negatives_rule"):
        compose_config("default", ["eval.hits_negatives_rule=c50"])
