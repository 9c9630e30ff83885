"""Filtered ranking of one split during training (validation each epoch, test at the end)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .data import SplitData
from .rng import isolated_rng


def evaluate_split(
    model: nn.Module, split: SplitData, graph: Any, cfg: Any, num_relations: int
) -> dict[str, float]:
    """Filtered ranking metrics of ``split`` (both directions, ``eval.max_queries`` first facts)
    with ``model`` in eval mode; global RNG states are left untouched.  When the dataset
    declares labeled negatives for the split (TRI-SQR), also ``accuracy`` and ``num_pairs``
    over all its facts and those negatives (:mod:`cmpnn_dist.evaluation.pair_accuracy`)."""
    from cmpnn_dist.evaluation import evaluate, pair_accuracy

    was_training = model.training
    model.eval()
    try:
        with isolated_rng(), torch.no_grad():
            metrics = evaluate(
                model,
                graph,
                split.queries,
                split.filter_triples,
                num_relations=num_relations,
                batch_size=cfg.eval.batch_size,
                max_queries=cfg.eval.max_queries,
                num_negatives_hits=cfg.eval.num_negatives_hits,
            )
            if split.labeled_negatives is not None and len(split.labeled_negatives):
                metrics.update(
                    pair_accuracy(
                        model,
                        graph,
                        split.queries,
                        split.labeled_negatives,
                        batch_size=cfg.eval.batch_size,
                    )
                )
    finally:
        model.train(was_training)
    return {k: float(v) for k, v in metrics.items()}
