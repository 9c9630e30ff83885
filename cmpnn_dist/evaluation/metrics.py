"""Filtered ranks and ranking metrics (paper section 6.1; appendix on the inductive protocol).

Tie policies (``eval.ties``), with ``greater`` / ``equal`` the numbers of (non-filtered)
candidates c != target with ``score[c] > score[target]`` / ``score[c] == score[target]``:

    pessimistic:  rank = 1 + greater + equal          (a tied target ranks below its ties)
    average:      rank = 1 + greater + equal / 2      (OGB's Evaluator: the mean of the
                                                        optimistic and pessimistic rank)

Filtered candidates (``filter_mask`` True: other true answers of the same query) are
excluded; the target itself is never counted, whatever its ``filter_mask`` entry says.

Hits@10 with 50 negatives (the inductive GraIL protocol) is computed from the filtered rank
in closed form, as the probability that the target is in the top 10 of N = 50 samples
(``eval.num_negatives_hits``) drawn with replacement.  With r the filtered rank and n the
non-filtered candidates it was taken among (the target excluded; :func:`filtered_rank`),
``eval.hits_negatives_rule`` says whose rule it is:

    paper        (default) the paper's code: HxyScotthuang/CMPNN ``cmpnn/task.py``,
                 ``InductiveKnowledgeGraphCompletion.evaluate``, the same as NBFNet's
                 TorchDrug code (DeepGraphLearning/NBFNet ``nbfnet/task.py``).  Its ranking
                 is ``sum((pos_pred <= pred) & mask) + 1`` with ``mask`` built from the
                 split's fact graph, which does not hold the test triple, so the target is
                 counted against itself (ranking = r + 1) and in ``mask.sum`` (= n + 1);
                 fp_rate = (ranking - 1) / mask.sum:
                     p = r / (n + 1)
                     hits@10_50 = sum_{i=0}^{9} C(N, i) p^i (1 - p)^(N - i)
                 i.e. N samples from all n + 1 candidates, the target among them (a sample
                 of the target ties it and counts against it).
    nbfnet_pyg   NBFNet-PyG's ``script/run.py``: its ranking leaves the target out and its
                 ``num_negative`` counts the non-filtered negatives, and it draws N - 1
                 negatives ("choose i false positive from num_sample - 1 negatives"):
                     p = (r - 1) / n
                     hits@10_50 = sum_{i=0}^{9} C(N - 1, i) p^i (1 - p)^(N - 1 - i)
    n_negatives  N negatives beside the target, from the n non-filtered ones:
                     p = (r - 1) / n
                     hits@10_50 = sum_{i=0}^{9} C(N, i) p^i (1 - p)^(N - i)
                 always <= nbfnet_pyg's; the gap is p * C(N - 1, 9) p^9 (1 - p)^(N - 10), at
                 most 0.028 for N = 50 (at p = 0.2: 0.444 against 0.472).

``paper`` is never above the other two (its p is the larger, r / (n + 1) >= (r - 1) / n as
r <= n + 1, and it draws N samples); with n = 0 (every other candidate filtered) it is 0,
as upstream (the target is the only sample and ties itself), the other two 1.
``tests/unit/evaluation/test_metrics.py`` checks each rule against a transcription of its upstream
formula and against a Monte Carlo draw of its sampling model.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cmpnn_dist.config import HitsNegativesRule, Ties, choices


def filtered_rank(scores: Tensor, target: Tensor, filter_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Pessimistic filtered rank of each target.

    Args:
        scores: float [B, N] scores of every candidate (higher = more likely).
        target: int64 [B] index of the true answer.
        filter_mask: bool [B, N], True = another true answer, excluded from the ranking.

    Returns:
        ``(rank int64 [B] >= 1, num_candidates int64 [B])``; num_candidates counts the
        non-filtered negatives (every candidate except the target and filtered ones).
    """
    if scores.dim() != 2 or filter_mask.shape != scores.shape or target.shape != scores.shape[:1]:
        raise ValueError(
            f"scores [B, N], target [B], filter_mask [B, N] expected; got {tuple(scores.shape)}, "
            f"{tuple(target.shape)}, {tuple(filter_mask.shape)}"
        )
    rows = torch.arange(scores.shape[0], device=scores.device)
    negative = ~filter_mask.bool()
    negative[rows, target] = False
    target_score = scores[rows, target].unsqueeze(1)
    rank = 1 + ((scores >= target_score) & negative).sum(1)
    return rank.long(), negative.sum(1).long()


# the non-numeric entries of a split's results (how it was ranked): text columns in
# metrics.csv (``valid_protocol``, ``test_hits_negatives_rule``), labels in summaries
RESULT_LABELS: tuple[str, ...] = ("protocol", "ties", "hits_negatives_rule", "filter")
TIES: tuple[str, ...] = choices(Ties)  # the config's Literals: the one list
HITS_NEGATIVES_RULES: tuple[str, ...] = choices(HitsNegativesRule)


def tied_rank(greater: Tensor, equal: Tensor, ties: str = "pessimistic") -> Tensor:
    """Rank from the counts of candidates scoring above / equal to the target.

    Args:
        greater, equal: int [Q] counts (see the module docstring).
        ties: ``pessimistic`` (int64 ranks) or ``average`` (float64, halves possible).
    """
    if ties == "pessimistic":
        return (1 + greater + equal).long()
    if ties == "average":
        return 1.0 + greater.double() + equal.double() / 2
    raise ValueError(f"eval.ties={ties!r}: choose one of {list(TIES)}")


def hits_at_k_with_negatives(
    ranks: Tensor,
    num_candidates: Tensor,
    k: int = 10,
    num_negatives: int = 50,
    rule: str = "paper",
) -> Tensor:
    """Per-query probability that the target is in the top ``k`` of ``num_negatives`` samples.

    Args:
        ranks: [B] filtered ranks r (>= 1; float halves from average ties are fine).
        num_candidates: int64 [B] non-filtered negatives n each rank was taken among.
        k: the Hits cut-off.  num_negatives: N, the number of samples.
        rule: ``paper`` (p = r / (n + 1), m = N), ``nbfnet_pyg`` (p = (r - 1) / n,
            m = N - 1) or ``n_negatives`` (p = (r - 1) / n, m = N); see the module docstring.

    Returns: float64 [B], sum_{i<k} C(m, i) p^i (1 - p)^(m - i).
    """
    if rule not in HITS_NEGATIVES_RULES:
        raise ValueError(
            f"eval.hits_negatives_rule={rule!r}: choose one of {list(HITS_NEGATIVES_RULES)}"
        )
    r, n = ranks.double(), num_candidates.double()
    if rule == "paper":
        m, p = num_negatives, r / (n + 1)
    else:
        m = num_negatives - 1 if rule == "nbfnet_pyg" else num_negatives
        p = (r - 1) / n.clamp(min=1)
    p = p.clamp(0.0, 1.0)
    total = torch.zeros_like(p)
    for i in range(min(k, m + 1)):
        total += math.comb(m, i) * p.pow(i) * (1 - p).pow(m - i)
    return total


def ranking_metrics(
    ranks: Tensor,
    num_candidates: Tensor,
    num_negatives_hits: int = 50,
    hits_negatives_rule: str = "paper",
) -> dict[str, float]:
    """Mean metrics over queries.

    Args:
        ranks: int64 [Q] filtered ranks (>= 1).  num_candidates: int64 [Q].
        num_negatives_hits: n of the sampled-negatives Hits@10 (``hits@10_50`` key keeps the
            name for n = 50; other n give ``hits@10_{n}``).
        hits_negatives_rule: what the n samples are (:func:`hits_at_k_with_negatives`).

    Returns: ``{"mr", "mrr", "hits@1", "hits@3", "hits@10", "hits@10_50"}`` as floats.
    """
    if ranks.numel() == 0:
        raise ValueError("ranking_metrics needs at least one rank")
    r = ranks.double()
    out = {
        "mr": float(r.mean()),
        "mrr": float((1.0 / r).mean()),
        "hits@1": float((r <= 1).double().mean()),
        "hits@3": float((r <= 3).double().mean()),
        "hits@10": float((r <= 10).double().mean()),
    }
    hits = hits_at_k_with_negatives(
        ranks, num_candidates, 10, num_negatives_hits, hits_negatives_rule
    )
    out[f"hits@10_{num_negatives_hits}"] = float(hits.mean())
    return out
