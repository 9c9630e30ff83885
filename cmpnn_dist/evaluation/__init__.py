"""Filtered ranking evaluation: ranks, metrics and the both-direction evaluation loop."""

from cmpnn_dist.evaluation.metrics import (
    filtered_rank,
    filtered_ranks,
    hits_at_k_with_negatives,
    ranking_metrics,
)
from cmpnn_dist.evaluation.ranking import AnswerIndex, evaluate, rank_queries

__all__ = [
    "AnswerIndex",
    "evaluate",
    "filtered_rank",
    "filtered_ranks",
    "hits_at_k_with_negatives",
    "rank_queries",
    "ranking_metrics",
]
