"""Filtered ranks and ranking metrics (paper section 6.1; appendix on the inductive protocol).

Tie policies (``eval.ties``), with ``greater`` / ``equal`` the numbers of (non-filtered)
candidates c != target with ``score[c] > score[target]`` / ``score[c] == score[target]``:

    pessimistic:  rank = 1 + greater + equal          (a tied target ranks below its ties)
    average:      rank = 1 + greater + equal / 2      (OGB's Evaluator: the mean of the
                                                        optimistic and pessimistic rank)

Filtered candidates (``filter_mask`` True: other true answers of the same query) are
excluded; the target itself is never counted, whatever its ``filter_mask`` entry says.

Hits@10 with 50 negatives (the inductive GraIL protocol) is computed from the filtered rank,
as the paper's code does: with p = (rank - 1) / num_candidates the probability that one random
negative outscores the target, the chance that fewer than 10 of 50 sampled negatives do is

    hits@10_50 = sum_{i=0}^{9} C(50, i) p^i (1 - p)^(50 - i)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cmpnn_dist.config import Ties, choices


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


TIES: tuple[str, ...] = choices(Ties)  # the config's Literal: the one list


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
    ranks: Tensor, num_candidates: Tensor, k: int = 10, num_negatives: int = 50
) -> Tensor:
    """Per-query sum_{i<k} C(n, i) p^i (1-p)^(n-i), p = (rank-1)/num_candidates; float64 [B]."""
    p = (ranks.double() - 1) / num_candidates.double().clamp(min=1)
    p = p.clamp(0.0, 1.0)
    total = torch.zeros_like(p)
    for i in range(min(k, num_negatives + 1)):
        total += math.comb(num_negatives, i) * p.pow(i) * (1 - p).pow(num_negatives - i)
    return total


def ranking_metrics(
    ranks: Tensor, num_candidates: Tensor, num_negatives_hits: int = 50
) -> dict[str, float]:
    """Mean metrics over queries.

    Args:
        ranks: int64 [Q] filtered ranks (>= 1).  num_candidates: int64 [Q].
        num_negatives_hits: n of the sampled-negatives Hits@10 (``hits@10_50`` key keeps the
            name for n = 50; other n give ``hits@10_{n}``).

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
    hits = hits_at_k_with_negatives(ranks, num_candidates, 10, num_negatives_hits)
    out[f"hits@10_{num_negatives_hits}"] = float(hits.mean())
    return out
