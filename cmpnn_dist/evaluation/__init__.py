"""Filtered ranking evaluation (ranks, metrics, the both-direction loop) and the binary accuracy
over labeled query pairs (TRI-SQR)."""

from cmpnn_dist.evaluation.metrics import (
    filtered_rank,
    hits_at_k_with_negatives,
    ranking_metrics,
    tied_rank,
)
from cmpnn_dist.evaluation.pair_accuracy import pair_accuracy, sign_accuracy, triple_logits
from cmpnn_dist.evaluation.rank_table import RankTable
from cmpnn_dist.evaluation.ranking import (
    PROTOCOLS,
    AnswerIndex,
    evaluate,
    metrics_of,
    rank_queries,
    rank_split,
)

__all__ = [
    "PROTOCOLS",
    "AnswerIndex",
    "RankTable",
    "metrics_of",
    "rank_split",
    "tied_rank",
    "evaluate",
    "filtered_rank",
    "hits_at_k_with_negatives",
    "pair_accuracy",
    "rank_queries",
    "ranking_metrics",
    "sign_accuracy",
    "triple_logits",
]
