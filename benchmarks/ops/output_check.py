"""Check a benchmarked implementation against an oracle in the same run that times it.

A benchmark that only times kernels cannot tell a fast tiling from a fast wrong one: on a GPU
the autotuner keeps whichever configuration ran fastest on the benchmark graph, and the unit
tests only ran the configurations they name, on small graphs.  So every implementation's
outputs and gradients on the benchmark's own inputs are compared with an oracle: the
reference implementation (:mod:`cmpnn_dist.ops.vectorized`) in float32 on the same input
values (bfloat16 inputs upcast).

The loss behind the gradients weights every output element with a fixed random weight, so a
gradient sent to the wrong node, query or channel shows (the timing loop's plain ``sum()``
gives every element the same upstream gradient and would hide it).  Per tensor the error is
``|got - oracle| / max|oracle|``.  An implementation passes when every output and gradient
element is within the dtype's tolerance, except, with max / min aggregations, up to
``TIE_FRACTION`` of the gradient elements: an exact tie at a max / min may route the
gradient to a different edge, and both routings are valid (see :mod:`cmpnn_dist.ops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}
TIE_FRACTION = 1e-4


def outputs_and_grads(
    prop: Callable[..., dict[str, Tensor]],
    graph: object,
    x: Tensor,
    message: str,
    relation: Tensor | tuple[Tensor, ...],
    leaves: Sequence[Tensor],
    aggregators: Sequence[str],
    seed: int = 1,
) -> list[Tensor]:
    """[each aggregator's output, then d loss / d leaf for each leaf], float32, detached.

    loss = sum over aggregators a of sum(out[a] * W_a), with W_a ~ N(0, 1) drawn from ``seed``.
    """
    out = prop(graph, x, relation, message=message, aggregators=tuple(aggregators))
    gen = torch.Generator(device=x.device).manual_seed(seed)
    loss = x.new_zeros((), dtype=torch.float32)
    for a in aggregators:
        weight = torch.randn(out[a].shape, generator=gen, device=x.device)
        loss = loss + (out[a].float() * weight).sum()
    grads = torch.autograd.grad(loss, list(leaves))
    return [out[a].detach().float() for a in aggregators] + [g.float() for g in grads]


def oracle(
    graph: object,
    x: Tensor,
    message: str,
    relation: Tensor | tuple[Tensor, ...],
    leaves: Sequence[Tensor],
    aggregators: Sequence[str],
) -> list[Tensor]:
    """:func:`outputs_and_grads` of the reference implementation on float32 copies of the
    inputs (``leaves`` must hold ``x`` and every relation tensor)."""
    from cmpnn_dist.ops import get_impl

    copies = {id(t): t.detach().float().requires_grad_() for t in leaves}
    x32 = copies[id(x)]
    if isinstance(relation, tuple):
        rel32: Tensor | tuple[Tensor, ...] = tuple(copies[id(t)] for t in relation)
    else:
        rel32 = copies[id(relation)]
    return outputs_and_grads(
        get_impl("reference", x32),
        graph,
        x32,
        message,
        rel32,
        [copies[id(t)] for t in leaves],
        aggregators,
    )


def compare(
    got: Sequence[Tensor],
    want: Sequence[Tensor],
    names: Sequence[str],
    n_outputs: int,
    dtype: torch.dtype,
    ties: bool = False,
) -> dict:
    """{"ok", "out_err", "grad_err", "grad_frac_over_tol", "tol", "tensors"}.

    Errors are relative to each oracle tensor's largest magnitude; the first ``n_outputs``
    tensors are outputs, the rest gradients; ``tensors`` has each one's max error and fraction
    of elements over the tolerance, by name.  ``ties`` (max / min aggregations): up to
    ``TIE_FRACTION`` of the gradient elements may differ (an exact tie routed elsewhere).
    """
    if not len(got) == len(want) == len(names):
        raise ValueError(f"{len(got)} tensors to check against {len(want)} ({len(names)} names)")
    tol = TOLERANCE[dtype]
    out_err = grad_err = 0.0
    over = total = 0
    tensors = {}
    for i, (name, g, w) in enumerate(zip(names, got, want, strict=True)):
        if g.shape != w.shape:
            raise ValueError(f"{name}: shape {tuple(g.shape)}, oracle {tuple(w.shape)}")
        scale = float(w.abs().max()) if w.numel() else 0.0
        err = (g.to(w.device) - w).abs() / (scale if scale > 0 else 1.0)
        worst = float(err.max()) if err.numel() else 0.0
        n_over = int((err > tol).sum())
        tensors[name] = {"max_err": worst, "frac_over_tol": n_over / max(err.numel(), 1)}
        if i < n_outputs:
            out_err = max(out_err, worst)
        else:
            grad_err = max(grad_err, worst)
            over += n_over
            total += err.numel()
    frac = over / total if total else 0.0
    ok = out_err <= tol and frac <= (TIE_FRACTION if ties else 0.0)
    return {
        "ok": ok,
        "out_err": out_err,
        "grad_err": grad_err,
        "grad_frac_over_tol": frac,
        "tol": tol,
        "tensors": tensors,
    }


def describe(check: dict | None) -> str:
    """'ok (out 3e-07, grad 2e-06)' for a markdown table cell, plus the fraction of each
    tensor's elements over the tolerance where there are any."""
    if not check:
        return "-"
    if "skipped" in check:
        return check["skipped"]
    word = "ok" if check["ok"] else "FAILED"
    text = f"{word} (out {check['out_err']:.0e}, grad {check['grad_err']:.0e}"
    tensors = check.get("tensors", {})
    over = {k: v["frac_over_tol"] for k, v in tensors.items() if v["frac_over_tol"]}
    if over:
        text += f"; over {check['tol']:.0e}: " + ", ".join(f"{k} {v:.1e}" for k, v in over.items())
    return text + ")"
