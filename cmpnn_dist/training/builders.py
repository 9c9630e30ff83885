"""What a training run is made of, built from the config in one place (as torchtitan's
TrainSpec): the optimizer, the learning-rate schedule, the loss and the forward's precision.

:class:`~cmpnn_dist.training.trainer.Trainer` calls these builders and nothing else decides
them, so a new optimizer or schedule is one function here plus one option in
:mod:`cmpnn_dist.config`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .loss import self_adversarial_bce

LossFn = Callable[[Tensor, Tensor], Tensor]


def build_optimizer(cfg: Any, model: nn.Module) -> torch.optim.Optimizer:
    """Adam with ``train.lr`` over every parameter (the paper's optimizer)."""
    return torch.optim.Adam(model.parameters(), lr=cfg.train.lr)


def lr_factor(step: int, total: int, schedule: str, warmup: int) -> float:
    """Multiplier of ``train.lr`` for the update that follows ``step`` completed steps.

    Warmup ramps linearly over the first ``warmup`` steps (step 0 -> 1/warmup, reaching 1);
    then ``constant`` keeps 1, ``linear`` decays to 0 at ``total``, ``cosine`` follows
    ``0.5 (1 + cos(pi p))`` with p the fraction of the post-warmup steps done.
    """
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(total - warmup, 1)
    p = min(max(step - warmup, 0) / span, 1.0)
    if schedule == "linear":
        return 1.0 - p
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown train.lr_schedule {schedule!r}")


def build_lr_scheduler(
    cfg: Any, optimizer: torch.optim.Optimizer, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """``train.lr_schedule`` with ``train.warmup_steps`` over ``total_steps`` updates; stepped
    once per training step, saved in every checkpoint (so a resumed run continues the curve)."""
    tc = cfg.train
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps, tc.lr_schedule, tc.warmup_steps)
    )


def build_loss(cfg: Any) -> LossFn:
    """Self-adversarial binary cross-entropy (paper appendix E) at
    ``train.adversarial_temperature``: ``loss(pos_logit [b], neg_logit [b, k])``."""
    temperature = cfg.train.adversarial_temperature
    return lambda pos, neg: self_adversarial_bce(pos, neg, temperature)


def autocast(cfg: Any, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The forward pass's precision: ``train.precision=bf16`` runs it under bfloat16 autocast
    (weights, optimizer state, loss and evaluation stay float32); ``fp32`` does nothing."""
    if cfg.train.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
