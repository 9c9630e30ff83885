"""Binary accuracy over labeled query pairs: TRI-SQR's metric (paper appendix H).

A *labeled pair* is a candidate fact ``r(u, v)`` with a label: the split's facts are the
positives, a dataset's ``labeled_negatives`` (TRI-SQR: ``r0(u, v)`` for every ``v`` of the
counterpart triangle / square) the negatives.  The model's logit ``s(u, r, v)`` classifies it
as true when ``sigmoid(s) > 0.5``, i.e. ``s > 0``::

    accuracy = ( #{positives with s > 0} + #{negatives with s <= 0} ) / (P + Q)

Only the tail direction ``(u, r) -> v`` is scored, as in the appendix.  Datasets that store
``labeled_negatives`` in their manifest get ``accuracy`` (and ``num_pairs``) beside the ranking
metrics of that split automatically (:func:`cmpnn_dist.training.validation.evaluate_split`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.graph import Graph


def sign_accuracy(pos_logits: Tensor, neg_logits: Tensor) -> float:
    """Fraction of the P + Q labeled pairs on the right side of logit 0.

    Args:
        pos_logits: float [P] logits of true facts (right when > 0).
        neg_logits: float [Q] logits of false facts (right when <= 0).
    """
    total = pos_logits.numel() + neg_logits.numel()
    if total == 0:
        raise ValueError("sign_accuracy: no labeled pairs")
    right = int((pos_logits > 0).sum()) + int((neg_logits <= 0).sum())
    return right / total


def triple_logits(model: nn.Module, graph: Graph, triples: Tensor, batch_size: int = 16) -> Tensor:
    """The model's logit of each fact ``(h, r, t)``: ``model(graph, [h], [r])[0, t]``.

    Facts sharing a query ``(h, r)`` share one forward row; queries run ``batch_size`` at a
    time on the device of the model's parameters.

    Args:
        model: ``model(graph, heads [B], rels [B]) -> logits [B, N]``.
        graph: the message graph the facts are scored on.
        triples: int64 [T, 3].

    Returns: float [T] on the CPU, in the order of ``triples``.
    """
    triples = triples.long().reshape(-1, 3).cpu()
    out = torch.empty(triples.shape[0])
    if triples.shape[0] == 0:
        return out
    param = next(iter(model.parameters()), None)
    device = param.device if param is not None else torch.device("cpu")
    graph = graph.to(device) if graph.device != device else graph
    keys, which = torch.unique(triples[:, :2], dim=0, return_inverse=True)  # [K, 2], [T]
    for lo in range(0, keys.shape[0], batch_size):
        hi = min(lo + batch_size, keys.shape[0])
        logits = model(graph, keys[lo:hi, 0].to(device), keys[lo:hi, 1].to(device)).float()
        rows = torch.nonzero((which >= lo) & (which < hi)).squeeze(1)
        out[rows] = logits[(which[rows] - lo).to(device), triples[rows, 2].to(device)].cpu()
    return out


def pair_accuracy(
    model: nn.Module,
    graph: Graph,
    positives: Tensor,
    negatives: Tensor,
    batch_size: int = 16,
) -> dict[str, float]:
    """``{"accuracy", "num_pairs"}`` of ``positives`` [P, 3] (true) and ``negatives`` [Q, 3]
    (false) on ``graph``; call under ``torch.no_grad`` with the model in eval mode."""
    pos = triple_logits(model, graph, positives, batch_size)
    neg = triple_logits(model, graph, negatives, batch_size)
    return {"accuracy": sign_accuracy(pos, neg), "num_pairs": float(pos.numel() + neg.numel())}
