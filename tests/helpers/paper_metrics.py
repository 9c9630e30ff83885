"""The paper's code's evaluation, transcribed (the reference several metric tests share)."""

from __future__ import annotations

import math

import torch


def paper_evaluate(
    graph: list[tuple[int, int, int]], tests: torch.Tensor, pred: torch.Tensor, num_sample: int = 50
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Transcription of HxyScotthuang/CMPNN ``cmpnn/task.py``,
    ``InductiveKnowledgeGraphCompletion.target`` (the mask from the split's fact graph: False
    at every t' with (h, t', r) an edge for tail prediction, every h' with (h', t, r) for head
    prediction) and ``.evaluate`` (``ranking = sum((pos_pred <= pred) & mask) + 1``,
    ``fp_rate = (ranking - 1) / mask.sum``, C(num_sample, i) by factorials).  Rows alternate
    tail / head prediction of each test triple; float64 instead of upstream's float32."""
    num_nodes = pred.shape[1]
    mask = torch.ones(len(tests), 2, num_nodes, dtype=torch.bool)
    for q, (h, r, t) in enumerate(tests.tolist()):
        for eh, er, et in graph:
            if eh == h and er == r:
                mask[q, 0, et] = 0
            if et == t and er == r:
                mask[q, 1, eh] = 0
    mask = mask.view(-1, num_nodes)
    target = torch.stack([tests[:, 2], tests[:, 0]], dim=1).view(-1)
    pos_pred = pred.gather(-1, target.unsqueeze(-1))
    ranking = torch.sum((pos_pred <= pred) & mask, dim=-1) + 1
    fp_rate = (ranking - 1).double() / mask.sum(dim=-1)
    score = 0
    for i in range(10):
        num_comb = math.factorial(num_sample) / math.factorial(i) / math.factorial(num_sample - i)
        score += num_comb * (fp_rate**i) * ((1 - fp_rate) ** (num_sample - i))
    return score, mask, target
