"""Per-step time split of a DDP worker, measured with hooks (no change to the loop).

Enabled with ``CMPNN_TIMING=1`` in the workers' environment (the driver forwards it); off, it
adds nothing.  For each training step (a forward pass in ``train()`` mode):

* ``forward``  -- the wrapped model's forward call (pre-hook to post-hook);
* ``backward`` -- from the moment the gradient of the forward output is computed (first
  backward op) to the last parameter's gradient accumulation (``register_post_accumulate_
  grad_hook``); it includes the part of the all-reduce that overlaps with it;
* ``all_reduce`` -- sum over DDP gradient buckets of launch-to-completion time of the bucket's
  all-reduce (a comm hook wrapping ``allreduce_hook``, i.e. gradients pre-divided by the world
  size then summed);
* ``step``     -- from one training forward to the next (so it also holds the optimizer,
  sampler, metric reduction and logging).

On CUDA every mark synchronizes the device, so timings are honest but slightly slower.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any

import torch
from torch import nn

ENV_TIMING = "CMPNN_TIMING"


class StepTimer:
    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = os.environ.get(ENV_TIMING) == "1" if enabled is None else enabled
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._cuda = False
        self._fwd_start: float | None = None
        self._bwd_start: float | None = None
        self._last_grad: float | None = None
        self._prev_step_start: float | None = None

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def attach(self, model: nn.Module) -> None:
        if not self.enabled:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        self._cuda = bool(params) and params[0].is_cuda
        model.register_forward_pre_hook(self._pre_forward)
        model.register_forward_hook(self._post_forward)
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)
        if hasattr(model, "register_comm_hook"):
            # a lambda: DDP rejects hooks whose (string) annotations are not dist.GradBucket
            model.register_comm_hook(
                None, lambda state, bucket: self._timed_allreduce(state, bucket)
            )

    def _close_backward(self) -> None:
        if self._bwd_start is not None and self._last_grad is not None:
            self._add("backward", max(0.0, self._last_grad - self._bwd_start))
        self._bwd_start = self._last_grad = None

    def _pre_forward(self, mod: nn.Module, args: Any) -> None:
        if not mod.training:
            return
        self._close_backward()
        now = self._now()
        if self._prev_step_start is not None:
            self._add("step", now - self._prev_step_start)
        self._prev_step_start = now
        self._fwd_start = now

    def _post_forward(self, mod: nn.Module, args: Any, out: Any) -> None:
        if not mod.training or self._fwd_start is None:
            return
        self._add("forward", self._now() - self._fwd_start)
        self._fwd_start = None
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_started)

    def _add(self, key: str, seconds: float) -> None:
        self.totals[key] += seconds
        self.counts[key] += 1

    def _backward_started(self, grad: torch.Tensor) -> None:
        self._bwd_start = self._now()

    def _grad_ready(self, p: torch.Tensor) -> None:
        self._last_grad = time.perf_counter()

    def _timed_allreduce(self, state: Any, bucket: Any) -> torch.futures.Future:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        start = time.perf_counter()
        fut = default_hooks.allreduce_hook(state, bucket)

        def done(f: torch.futures.Future) -> torch.Tensor:
            self.totals["all_reduce"] += time.perf_counter() - start  # summed per step
            return f.value()[0] if isinstance(f.value(), list) else f.value()

        return fut.then(done)

    def summary(self) -> dict[str, float]:
        """Mean seconds per step of each part; ``steps`` counts the measured steps."""
        self._close_backward()
        n = max(self.counts["forward"], 1)
        out = {f"{k}_s": v / max(self.counts.get(k, n), 1) for k, v in self.totals.items()}
        out["steps"] = n
        return out
