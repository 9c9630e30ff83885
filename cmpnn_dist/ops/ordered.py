"""Sums whose floats do not depend on torch's intra-op thread count, for the model's modules
whose torch backward has one that does (a Linear over the rows of every node, layer norm).

BLAS (MKL here) splits the contraction of a long matrix product between threads, so a Linear's
weight gradient over M = N B rows (``g.t() @ x``, contraction M) depends on the thread count;
a product with a short contraction and several columns (the forward, d x) does not, one
with a single column (``Linear(H, 1)``: BLAS's matrix-vector path) does (measured, MKL 2024.2).  On
the CPU torch reduces a tensor to *one* element (``x.sum()``, ``x.mean()``, a bias of
``Linear(H, 1)`` in the backward) in two passes when it has at least 32,768 elements: each
thread sums its own contiguous share and the shares are added, so the float result depends on
the number of threads.  A reduction with several outputs gives each output to one thread, in
an order fixed by the shapes (measured: sums over rows of [70,000, c] for c >= 2, over the
middle dim of [16, 7,000, c] for c >= 1, identical with 1 to 4 threads).  The CPU layer norm
backward sums d gamma and d beta in per-thread buffers, so they depend on the thread count
too.  What is here:

    sum_rows(x [M, c]) -> [c]     rows summed in 64 fixed blocks, then the blocks in order
    mean(x) -> []                 sum_rows(x.reshape(-1, 1)) / numel
    contract(a, b) -> a @ b       a long contraction in 64 fixed blocks (one bmm), then in order
    linear(x, w, b)               F.linear (one output: with a zero second column); weight and
                                  bias gradients by contract, sum_rows
    LayerNorm(d)                  nn.LayerNorm; d gamma, d beta in 64 fixed blocks of rows (the
                                  compiled kernel's one pass), d x by torch

The forward values of ``LayerNorm`` and of ``linear`` with several outputs are torch's own;
elsewhere only the order in which sums are taken changes.  Off the CPU, and under autocast
(bfloat16 is not thread-invariant anyway), ``linear`` and ``LayerNorm`` are torch's own.
``tests/unit/training/test_determinism.py`` checks them (and a whole training run) against 1 and
2 threads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx, once_differentiable

BLOCKS = 64  # partial sums per reduction: an output each, so no sum is split between threads


def sum_rows(x: Tensor) -> Tensor:
    """``x.sum(0)`` of x [M, c] in an order fixed by M: the first ``64 * (M // 64)`` rows in 64
    blocks of consecutive rows (each block's sum is one output of a torch reduction), the
    blocks in order, then the remaining rows.  Off the CPU: ``x.sum(0)``."""
    if x.dim() != 2:
        raise ValueError(f"sum_rows takes [M, c], got {tuple(x.shape)}")
    m = x.shape[0]
    per = m // BLOCKS
    if x.device.type != "cpu" or per == 0:  # < 64 rows of one column: never split
        return x.sum(0)
    blocks = x[: per * BLOCKS].reshape(BLOCKS, per, x.shape[1]).sum(1)  # [64, c]
    total = blocks.sum(0)
    if per * BLOCKS < m:
        total = total + x[per * BLOCKS :].sum(0)
    return total


def mean(x: Tensor) -> Tensor:
    """The mean of all elements of ``x`` (a 0-dim tensor), summed by :func:`sum_rows`."""
    return sum_rows(x.reshape(-1, 1))[0] / max(1, x.numel())


LONG = 4 * BLOCKS  # a contraction at least this long is taken in blocks


def contract(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` of a [m, K] and b [K, n] in an order fixed by the shapes: a contraction of at
    least ``LONG`` terms in 64 blocks of consecutive terms (one ``bmm``, a block per batch
    entry), the blocks' products summed in order, then the remaining terms'.  BLAS splits a
    long contraction between threads when the product is small (a Linear's weight gradient
    over M = N B rows; the input gradient of ``Linear(d, R2 d)``); the blocks' contractions
    are short.  Off the CPU, or shorter: ``a @ b``."""
    k = a.shape[1]
    if a.device.type != "cpu" or k < LONG:
        return a @ b
    per = k // BLOCKS
    head = per * BLOCKS
    ab = a[:, :head].reshape(a.shape[0], BLOCKS, per).transpose(0, 1)  # [64, m, per]
    out = torch.bmm(ab, b[:head].reshape(BLOCKS, per, b.shape[1])).sum(0)
    if head < k:
        out = out + a[:, head:] @ b[head:]
    return out


def _linear_forward(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """``F.linear``, except for one output: a product with one column goes to BLAS's
    matrix-vector path, which splits it by thread count; with a second, zero column it is a
    matrix product, which does not (faster than a sum over the last dim)."""
    if w.shape[0] != 1:
        return F.linear(x, w, b)
    y = F.linear(x, torch.cat([w, w.new_zeros(w.shape)]))[..., :1]
    return y if b is None else y + b


class _Linear(torch.autograd.Function):
    """:func:`_linear_forward` whose backward takes its products with :func:`contract` and the
    bias gradient with :func:`sum_rows`."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return _linear_forward(x, w, b)

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        g2 = g.reshape(-1, g.shape[-1])
        gx = contract(g2, w).reshape(x.shape) if need_x else None
        gw = contract(g2.t(), x.reshape(-1, x.shape[-1])) if need_w else None
        gb = sum_rows(g2) if need_b and ctx.has_bias else None
        return gx, gw, gb


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x [..., i], weight [o, i], bias [o] or None)``; on the CPU one output
    (``o == 1``) is taken with a zero second column, and, when a gradient can flow, the weight and
    bias gradients are summed over the rows by :func:`contract` and :func:`sum_rows`
    (torch's results depend on the thread count there: a product with one column, a long
    product's contraction, a bias with one output)."""
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return F.linear(x, weight, bias)
    leaves = (x, weight) if bias is None else (x, weight, bias)
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in leaves):
        return _linear_forward(x, weight, bias)
    return _Linear.apply(x, weight, bias)


class _LayerNorm(torch.autograd.Function):
    """Layer norm over the last dim (torch's forward and d x); d gamma = sum over rows of
    dy * x_hat, d beta = sum over rows of dy, in 64 fixed blocks of rows."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        y, mu, rstd = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mu, rstd)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, dy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, bias, mu, rstd = ctx.saved_tensors
        need_x, need_w, need_b, _ = ctx.needs_input_grad
        d = x.shape[-1]
        dy = dy.contiguous()
        dx = None
        if need_x:
            dx = torch.ops.aten.native_layer_norm_backward(
                dy, x, [d], mu, rstd, weight, bias, [True, False, False]
            )[0]
        dw = db = None
        if need_w or need_b:
            dw, db = _norm_param_grads(dy.reshape(-1, d), x.reshape(-1, d), mu, rstd)
        return dx, dw if need_w else None, db if need_b else None, None


def _norm_param_grads(dy: Tensor, x: Tensor, mu: Tensor, rstd: Tensor) -> tuple[Tensor, Tensor]:
    """(sum_i dy_i (x_i - mu_i) rstd_i, sum_i dy_i) over the rows of dy, x [M, d]: the compiled
    kernel's one pass over 64 fixed blocks of rows, or the same sums by :func:`sum_rows`."""
    if _compiled():
        return torch.ops.cmpnn_cpu.norm_param_grads(dy.contiguous(), x.contiguous(), mu, rstd)
    return sum_rows(dy * ((x - mu.reshape(-1, 1)) * rstd.reshape(-1, 1))), sum_rows(dy)


def _compiled() -> bool:
    """Whether the compiled CPU kernel loads (built on first use; a failure is remembered)."""
    from cmpnn_dist.ops.cpu_build import KernelUnavailable

    try:
        import cmpnn_dist.ops.cpu  # noqa: F401  (builds or loads the library)
    except KernelUnavailable:
        return False
    return True


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm(dim)`` (same parameters and forward) whose CPU backward sums d gamma and
    d beta in fixed blocks of rows, not in torch's per-thread buffers."""

    def forward(self, x: Tensor) -> Tensor:
        affine = self.weight is not None and self.bias is not None
        if (
            x.device.type != "cpu"
            or torch.is_autocast_enabled("cpu")
            or not affine
            or len(self.normalized_shape) != 1
            or not torch.is_grad_enabled()
        ):
            return super().forward(x)
        return _LayerNorm.apply(x, self.weight, self.bias, self.eps)


__all__ = ["BLOCKS", "LONG", "LayerNorm", "contract", "linear", "mean", "sum_rows"]
