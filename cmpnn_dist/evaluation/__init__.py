"""Filtered ranking evaluation (ranks, metrics, the both-direction loop) and the binary accuracy
over labeled query pairs (TRI-SQR)."""

from cmpnn_dist.evaluation.metrics import (
    filtered_rank,
    filtered_ranks,
    hits_at_k_with_negatives,
    ranking_metrics,
)
from cmpnn_dist.evaluation.pair_accuracy import pair_accuracy, sign_accuracy, triple_logits
from cmpnn_dist.evaluation.ranking import AnswerIndex, evaluate, rank_queries

__all__ = [
    "AnswerIndex",
    "evaluate",
    "filtered_rank",
    "filtered_ranks",
    "hits_at_k_with_negatives",
    "pair_accuracy",
    "rank_queries",
    "ranking_metrics",
    "sign_accuracy",
    "triple_logits",
]
