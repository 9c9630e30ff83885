"""self_adversarial_bce against a hand computation."""

from __future__ import annotations

import math

import pytest
import torch

from cmpnn_dist.training.loss import self_adversarial_bce


def _logsig(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_matches_hand_computation():
    pos = torch.tensor([2.0, -1.0])
    neg = torch.tensor([[0.0, 1.0, -2.0], [3.0, 3.0, 3.0]])
    alpha = 0.5
    expected = 0.0
    for p, row in zip(pos.tolist(), neg.tolist(), strict=True):
        z = [math.exp(v / alpha) for v in row]
        w = [x / sum(z) for x in z]
        expected += -_logsig(p) - sum(wi * _logsig(-v) for wi, v in zip(w, row, strict=True))
    expected /= 2
    got = self_adversarial_bce(pos, neg, alpha)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    # second row: equal logits -> uniform weights 1/3 -> -logsig(-1) - logsig(-3)
    row2 = -_logsig(-1.0) - _logsig(-3.0)
    assert self_adversarial_bce(pos[1:], neg[1:], 7.0).item() == pytest.approx(row2, rel=1e-6)


def test_weights_are_detached():
    pos = torch.tensor([0.5], requires_grad=True)
    neg = torch.tensor([[1.0, -1.0]], requires_grad=True)
    self_adversarial_bce(pos, neg, 1.0).backward()
    w = torch.softmax(torch.tensor([1.0, -1.0]), 0)
    # d/dneg_i of -w_i logsigmoid(-neg_i) with w constant = w_i * sigmoid(neg_i)
    assert torch.allclose(neg.grad[0], w * torch.sigmoid(torch.tensor([1.0, -1.0])))
    assert torch.allclose(pos.grad, torch.sigmoid(torch.tensor([0.5])) - 1)


def test_bad_shapes_and_temperature():
    with pytest.raises(ValueError, match="temperature"):
        self_adversarial_bce(torch.zeros(2), torch.zeros(2, 3), 0.0)
    with pytest.raises(ValueError, match="expected"):
        self_adversarial_bce(torch.zeros(2), torch.zeros(3, 3), 1.0)
