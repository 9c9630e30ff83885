"""Self-adversarial binary cross-entropy (paper appendix E, after RotatE / NBFNet).

For one query with positive logit ``s`` and negative logits ``s'_1..s'_k`` (logits of
``p = sigma(s)``)::

    w_i  = softmax_i(s'_i / alpha)                       (detached: no gradient flows into w)
    L    = -log sigma(s) - sum_i w_i * log sigma(-s'_i)  (log sigma(-s') = log(1 - p'))

and the batch loss is the mean of ``L`` over the queries.

Note on the weights: the paper writes ``w_i = softmax(log(1 - p'_i) / alpha)``, which would
put *less* weight on the hard negatives (those with a high ``p'``).  The reference code of
NBFNet and RotatE (and the intent of "self-adversarial" sampling: focus on hard negatives)
computes the softmax over the negative *logits*, ``softmax(s' / alpha)``; we follow the code.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def self_adversarial_bce(pos_logit: Tensor, neg_logit: Tensor, temperature: float) -> Tensor:
    """Self-adversarial BCE loss.

    Args:
        pos_logit: float [b], logit of each positive fact.
        neg_logit: float [b, k], logits of the k negatives of each positive.
        temperature: adversarial temperature alpha > 0 (weights ``softmax(neg / alpha)``).

    Returns:
        Scalar: ``mean_b( -logsigmoid(pos) - sum_i w_i logsigmoid(-neg_i) )``.
    """
    if temperature <= 0:
        raise ValueError(f"adversarial temperature must be > 0, got {temperature}")
    if pos_logit.dim() != 1 or neg_logit.dim() != 2 or neg_logit.shape[0] != pos_logit.shape[0]:
        raise ValueError(
            f"expected pos_logit [b] and neg_logit [b, k], got {tuple(pos_logit.shape)} "
            f"and {tuple(neg_logit.shape)}"
        )
    weights = torch.softmax(neg_logit.detach() / temperature, dim=-1)
    pos_term = -F.logsigmoid(pos_logit)
    neg_term = -(weights * F.logsigmoid(-neg_logit)).sum(dim=-1)
    return (pos_term + neg_term).mean()
