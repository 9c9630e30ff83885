"""Metric functions against hand-computed ranks (ties, filtering) and Hits@10 with 50 negatives.

The three ``eval.hits_negatives_rule`` values are checked against transcriptions of the
upstream formulas they name (the paper's code: HxyScotthuang/CMPNN ``cmpnn/task.py``,
``InductiveKnowledgeGraphCompletion.evaluate`` / ``target``; NBFNet-PyG: ``script/run.py``
``test`` with ``nbfnet/tasks.py`` ``compute_ranking`` / ``strict_negative_mask``) and against a
Monte Carlo draw of each rule's sampling model.
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import comb

import pytest
import torch

from cmpnn_dist.evaluation import filtered_rank, hits_at_k_with_negatives, ranking_metrics
from tests.helpers.paper_metrics import paper_evaluate

RULES = ("paper", "nbfnet_pyg", "n_negatives")


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


def _hits_by_hand(rank: Fraction | int, num: int, rule: str) -> float:
    """sum_{i<10} C(m, i) p^i (1-p)^(m-i) in exact fractions: paper p = r / (n + 1), m = 50;
    nbfnet_pyg p = (r - 1) / n, m = 49; n_negatives p = (r - 1) / n, m = 50."""
    r = Fraction(rank)
    p = r / (num + 1) if rule == "paper" else (r - 1) / num
    m = 49 if rule == "nbfnet_pyg" else 50
    return float(sum(comb(m, i) * p**i * (1 - p) ** (m - i) for i in range(10)))


@pytest.mark.parametrize("rule", RULES)
def test_hits_at_10_with_50_negatives_by_hand(rule):
    ranks = torch.tensor([1, 2, 11, 30, 101, 7])
    nums = torch.tensor([100, 100, 100, 200, 100, 40])
    got = hits_at_k_with_negatives(ranks, nums, rule=rule)
    want = [_hits_by_hand(int(r), int(n), rule) for r, n in zip(ranks, nums, strict=True)]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)
    assert got[4] == 0.0  # everything beats it
    if rule == "paper":  # the target is one of the 101 candidates sampled: p = 1 / 101
        assert 0.999 < got[0] < 1.0
    else:
        assert got[0] == 1.0  # nothing beats the target


def test_average_ties_give_fractional_ranks_under_every_rule():
    """eval.ties=average gives ranks like 2.5; each rule takes them as they are."""
    ranks, nums = torch.tensor([2.5, 10.5]), torch.tensor([60, 60])
    for rule in RULES:
        got = hits_at_k_with_negatives(ranks, nums, rule=rule)
        want = [_hits_by_hand(Fraction(5, 2), 60, rule), _hits_by_hand(Fraction(21, 2), 60, rule)]
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


def test_no_candidate_left_scores_as_upstream():
    """Every other candidate filtered (n = 0): the paper's code's mask holds the target alone,
    ranking 2, fp_rate 1, score 0; NBFNet-PyG's fp_rate 0 / 0 is taken as 0 here (score 1)."""
    rank, num = torch.tensor([1]), torch.tensor([0])
    assert float(hits_at_k_with_negatives(rank, num, rule="paper")[0]) == 0.0
    assert float(hits_at_k_with_negatives(rank, num, rule="nbfnet_pyg")[0]) == 1.0
    assert float(hits_at_k_with_negatives(rank, num, rule="n_negatives")[0]) == 1.0


def test_the_rules_at_p_one_fifth():
    """p = (r - 1) / n = 0.2: 0.444 with 50 negatives, 0.472 with NBFNet-PyG's 49; the paper's
    p = r / (n + 1) = 21 / 101 is larger and its value the lowest."""
    rank, num = torch.tensor([21]), torch.tensor([100])
    ours = float(hits_at_k_with_negatives(rank, num, rule="n_negatives")[0])
    pyg = float(hits_at_k_with_negatives(rank, num, rule="nbfnet_pyg")[0])
    paper = float(hits_at_k_with_negatives(rank, num)[0])  # the default
    assert round(ours, 3) == 0.444 and round(pyg, 3) == 0.472
    assert paper == pytest.approx(_hits_by_hand(21, 100, "paper"), abs=1e-12)
    assert paper < ours < pyg
    with pytest.raises(ValueError, match="hits_negatives_rule"):
        hits_at_k_with_negatives(rank, num, rule="torchdrug")


# --- transcriptions of the upstream formulas on hand-built score matrices -------------------


def _fact_graph_and_queries() -> tuple[list[tuple[int, int, int]], torch.Tensor, torch.Tensor]:
    """A fact graph (h, r, t) on 120 nodes, 3 relations, and test triples none of which is one
    of its edges; scores [Q, 120] per (test triple, direction), small integers so that ties
    are common, the target tied with filtered answers in the first row and with every
    candidate in the second."""
    gen = torch.Generator().manual_seed(5)
    num_nodes = 120
    raw = torch.randint(0, num_nodes, (400, 3), generator=gen).tolist()
    edges = {(h, r % 3, t) for h, r, t in raw} | {(0, 0, 1), (0, 0, 2), (0, 0, 3)}
    tests = [(0, 0, 5), (0, 0, 7), (3, 1, 3), (4, 2, 9), (11, 0, 1), (6, 1, 2), (2, 2, 8)]
    tests = [q for q in tests if q not in edges]
    assert len(tests) >= 6 and tests[0] == (0, 0, 5) and not set(tests) & edges
    scores = torch.randint(0, 60, (2 * len(tests), num_nodes), generator=gen).double()
    scores[0, [1, 2, 3, 5]] = 58.0  # target 5 tied with the filtered tails 1, 2, 3 of (0, 0, ?)
    scores[1] = 1.0  # every candidate tied with the target
    return sorted(edges), torch.tensor(tests), scores


def _nbfnet_pyg_test(graph, tests, pred, num_sample=50):
    """Transcription of NBFNet-PyG ``script/run.py`` ``test``: ``nbfnet/tasks.py``
    ``strict_negative_mask`` masks every true answer, the target included (the filter holds
    the test triples), ``compute_ranking`` is ``sum((pos_pred <= pred) & mask) + 1``,
    ``num_negative = mask.sum``, ``fp_rate = (ranking - 1) / num_negative`` and
    C(num_sample - 1, i) by factorials.  float64 instead of upstream's float32."""
    _, mask, target = paper_evaluate(graph, tests, pred, num_sample)
    mask = mask.clone()
    mask[torch.arange(len(target)), target] = False  # the target is one of the true answers
    pos_pred = pred.gather(-1, target.unsqueeze(-1))
    ranking = torch.sum((pos_pred <= pred) & mask, dim=-1) + 1
    num_negative = mask.sum(dim=-1)
    fp_rate = (ranking - 1).double() / num_negative
    score = 0
    for i in range(10):
        num_comb = (
            math.factorial(num_sample - 1) / math.factorial(i) / math.factorial(num_sample - i - 1)
        )
        score += num_comb * (fp_rate**i) * ((1 - fp_rate) ** (num_sample - i - 1))
    return score


def _ours(graph, tests, pred, rule):
    """This project: the filter is the fact graph's other true answers; pessimistic ranks."""
    _, mask, target = paper_evaluate(graph, tests, pred)
    rank, num = filtered_rank(pred, target, ~mask)
    return hits_at_k_with_negatives(rank, num, rule=rule), rank, num


def test_paper_rule_equals_the_paper_codes_evaluate():
    """``paper`` from our filtered ranks equals the paper's code's score query by query: its
    ranking is our rank + 1 (the target, not an edge of the fact graph, counts against
    itself) and its mask.sum our candidates + 1."""
    graph, tests, pred = _fact_graph_and_queries()
    want, mask, _ = paper_evaluate(graph, tests, pred)
    got, rank, num = _ours(graph, tests, pred, "paper")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert torch.equal(mask.sum(-1), num + 1)
    assert rank[1] == num[1] + 1  # all tied: pessimistic, the target below every tie
    assert len({round(float(v), 9) for v in got}) >= 5  # the rows differ
    for other in ("nbfnet_pyg", "n_negatives"):  # the transcription tells the rules apart
        assert (_ours(graph, tests, pred, other)[0] - want).abs().max() > 1e-3


def test_nbfnet_pyg_rule_equals_nbfnet_pygs_test():
    """``nbfnet_pyg`` from our filtered ranks equals NBFNet-PyG's score query by query: its
    ranking and num_negative leave the target out, as ours do."""
    graph, tests, pred = _fact_graph_and_queries()
    want = _nbfnet_pyg_test(graph, tests, pred)
    got = _ours(graph, tests, pred, "nbfnet_pyg")[0]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    for other in ("paper", "n_negatives"):
        assert (_ours(graph, tests, pred, other)[0] - want).abs().max() > 1e-3


# --- each rule's sampling model, drawn ---------------------------------------------------------


def _simulate(rule: str, scores, target: int, negative, trials: int, gen) -> float:
    """The rate at which the target is in the top 10 of the rule's samples, drawn uniformly
    with replacement; a sample scoring at least the target counts against it (pessimistic):
    paper: 50 samples from the n + 1 non-filtered candidates, the target among them (a sample
    of the target ties it); nbfnet_pyg: 49 negatives from the n; n_negatives: 50 from the n."""
    pool_mask = negative.clone()
    if rule == "paper":
        pool_mask[target] = True
    pool = scores[pool_mask]
    draws = torch.randint(len(pool), (trials, 49 if rule == "nbfnet_pyg" else 50), generator=gen)
    beats = (pool[draws] >= scores[target]).sum(1)
    return float((beats < 10).double().mean())


@pytest.mark.parametrize("rule", RULES)
def test_hits_at_10_of_50_equals_drawing_its_samples(rule):
    """Monte Carlo oracle, independent of the closed form: 100 candidates, about 10% filtered,
    a tie with the target.  The rule's closed form must fall within 5 standard errors of its
    drawn rate at p ~ 0.02 .. 0.3; at p ~ 0.2 the other two rules' closed forms are at least
    10 standard errors off (paper vs n_negatives differ by (1 - p) / (n + 1) in p, about 0.05
    in the value; nbfnet_pyg vs n_negatives by 0.028)."""
    gen = torch.Generator().manual_seed(0)
    trials, num_nodes = 100_000, 100
    for want_p in (0.02, 0.1, 0.2, 0.3):
        scores = torch.randn(num_nodes, generator=gen).double()
        filtered = torch.rand(num_nodes, generator=gen) < 0.1
        order = torch.argsort(scores, descending=True)
        target = int(order[int(want_p * num_nodes)])
        scores[int(order[int(want_p * num_nodes) + 3])] = scores[target]  # a tie
        filtered[target] = False
        negative = ~filtered
        negative[target] = False
        rate = _simulate(rule, scores, target, negative, trials, gen)
        stderr = max((rate * (1 - rate) / trials) ** 0.5, 1e-4)
        rank, num = filtered_rank(scores[None], torch.tensor([target]), filtered[None])
        closed = float(hits_at_k_with_negatives(rank, num, rule=rule)[0])
        assert abs(closed - rate) < 5 * stderr, (want_p, closed, rate)
        if want_p == 0.2:
            for other in RULES:
                if other != rule:
                    wrong = float(hits_at_k_with_negatives(rank, num, rule=other)[0])
                    assert abs(wrong - rate) > 10 * stderr, (other, wrong, rate)


def test_hits_at_k_counts_rank_k_itself():
    """Hits@k is the fraction of ranks <= k: rank 10 counts for Hits@10, 11 and an average
    tie's 10.5 do not; rank 3 counts for Hits@3, 1 for Hits@1."""
    ranks = torch.tensor([1.0, 3.0, 10.0, 10.5, 11.0])
    m = ranking_metrics(ranks, torch.full((5,), 50))
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (0.2, 0.4, 0.6)


def test_ranking_metrics_hand_values():
    ranks = torch.tensor([1, 2, 4, 20])
    nums = torch.tensor([50, 50, 50, 50])
    m = ranking_metrics(ranks, nums)
    assert m["mr"] == pytest.approx((1 + 2 + 4 + 20) / 4)
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 20) / 4)
    assert m["hits@1"] == pytest.approx(0.25)
    assert m["hits@3"] == pytest.approx(0.5)
    assert m["hits@10"] == pytest.approx(0.75)
    want = sum(_hits_by_hand(int(r), 50, "paper") for r in ranks) / 4  # the default rule
    assert m["hits@10_50"] == pytest.approx(want, abs=1e-12)
    assert set(m) == {"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50"}
    for rule in ("nbfnet_pyg", "n_negatives"):
        got = ranking_metrics(ranks, nums, hits_negatives_rule=rule)["hits@10_50"]
        assert got == pytest.approx(sum(_hits_by_hand(int(r), 50, rule) for r in ranks) / 4)
        assert got > m["hits@10_50"]


def test_the_rule_is_the_config_key_eval_hits_negatives_rule():
    from cmpnn_dist.cli.common import UsageError, compose_config

    assert compose_config("fb237_ind_v1", []).eval.hits_negatives_rule == "paper"
    for rule in RULES:
        cfg = compose_config("default", [f"eval.hits_negatives_rule={rule}"])
        assert cfg.eval.hits_negatives_rule == rule
    with pytest.raises(UsageError, match=r"eval\.hits_negatives_rule"):
        compose_config("default", ["eval.hits_negatives_rule=c50"])
    # the name once given to NBFNet-PyG's rule: refused, saying what it was and what to use
    with pytest.raises(UsageError) as info:
        compose_config("default", ["eval.hits_negatives_rule=torchdrug"])
    line = str(info.value)
    assert "\n" not in line
    assert "NBFNet-PyG's C(49, i)" in line and "nbfnet_pyg" in line and "=paper" in line


def test_a_saved_config_naming_torchdrug_reads_as_nbfnet_pyg():
    """Run configs saved in checkpoints with ``torchdrug`` (the name NBFNet-PyG's C(49, i) rule
    had) load as ``nbfnet_pyg``, so an old run evaluates as it did; a command-line override
    still wins, and ``torchdrug`` as an override is refused."""
    from cmpnn_dist.config import Config, config_to_dict
    from cmpnn_dist.errors import UsageError
    from cmpnn_dist.runs.restore import config_from_checkpoint

    saved = config_to_dict(Config())
    saved["eval"]["hits_negatives_rule"] = "torchdrug"
    assert config_from_checkpoint(saved, []).eval.hits_negatives_rule == "nbfnet_pyg"
    assert saved["eval"]["hits_negatives_rule"] == "torchdrug"  # the caller's dict untouched
    got = config_from_checkpoint(saved, ["eval.hits_negatives_rule=paper"])
    assert got.eval.hits_negatives_rule == "paper"
    with pytest.raises(UsageError, match="nbfnet_pyg"):
        config_from_checkpoint(saved, ["eval.hits_negatives_rule=torchdrug"])
    del saved["eval"]["hits_negatives_rule"]  # saved before the key existed: today's default
    assert config_from_checkpoint(saved, []).eval.hits_negatives_rule == "paper"
