"""Tuning space, autotuned variants and the launch of the fused Triton kernels.

The kernels (:mod:`cmpnn_dist.ops.triton_kernels`) take their tiling as constexprs:
``BLOCK_E`` gathered rows per step, ``BLOCK_C`` columns per program, warps, ``STAGES`` (the
edge loop's software-pipeline depth), ``HINTS`` (cache eviction hints) and ``PREFETCH`` (next
chunk's indices first).  On CUDA each kernel is wrapped in ``triton.autotune`` over the space
below, keyed by the flags that change its code; every tuning run's timings go to
:data:`TUNING_LOG`.  Under the interpreter (CPU tests) a fixed small tiling runs instead (the
interpreter ignores ``num_stages``: pipelined configs are checked for parity on a GPU only).
"""

from __future__ import annotations

import os

import torch

from cmpnn_dist.ops.triton_kernels import INTERPRET, KERNELS, bwd_kernel, fwd_kernel, triton

INTERPRET_PREFETCH = 1  # the interpreter's loop form (tests flip it to cover both)

# Autotune space (GPU only): gathered rows per step (BLOCK_E) x columns per program (BLOCK_C)
# x warps x loop pipeline stages x cache hints x index prefetch; the first entry is the default
# when tuning is off.  The default space is the plain loop (stages 1) that three H200 runs
# measured (benchmarks/results/ops/fused_kernels_h200.md): few rows per step with few warps won
# the forward and the input gradient, 16 x 64 the relation gradient; configs that won none of
# run 3's twelve tuning runs (8-warp, 4 x 256, 8 x 256 and hinted tilings) are dropped.
_SPACE = [
    (4, 128, 2, 1, 0, 1),
    (8, 64, 2, 1, 0, 0),
    (2, 256, 2, 1, 0, 1),
    (2, 256, 1, 1, 0, 1),
    (16, 64, 4, 1, 0, 1),
    (16, 64, 4, 1, 0, 0),
    (8, 128, 4, 1, 0, 1),
]
# Stages 2 - 3 hand the edge loop to Triton's software pipeliner (``tl.range(num_stages)``):
# the next steps' index loads and row gathers become asynchronous copies to shared memory
# (``cp.async``) while this step computes -- more loads in flight per program without the
# registers (compiled for sm_90 with Triton 3.6 and 3.9 here: 32 registers in bfloat16, 40 in
# float32, 4 - 16 KB of shared memory; every kernel variant compiles).  Not yet run on a GPU,
# so opt-in: CMPNN_TRITON_PIPELINE=1 adds these to the space (the device call's check plan does).
PIPELINED = [
    (4, 128, 2, 3, 0, 0),
    (4, 128, 2, 2, 0, 0),
    (8, 64, 2, 3, 0, 0),
    (2, 256, 2, 3, 0, 0),
    (16, 64, 4, 3, 0, 0),
    (8, 128, 4, 3, 0, 0),
]
# CMPNN_TRITON_CONFIGS="E,C,warps,stages,hints,prefetch;..." replaces the list;
# CMPNN_TRITON_AUTOTUNE=0 keeps only the first entry (saves compile time).
N_FIELDS = 6


def parse_space(text: str) -> list[tuple[int, ...]]:
    """ "E,C,warps,stages,hints,prefetch;..." -> [(E, C, warps, stages, hints, prefetch), ...]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        vals = tuple(int(v) for v in part.split(","))
        if len(vals) != N_FIELDS:
            raise ValueError(
                f"CMPNN_TRITON_CONFIGS {part!r}: expected E,C,warps,stages,hints,prefetch"
            )
        out.append(vals)
    if not out:
        raise ValueError("CMPNN_TRITON_CONFIGS is empty")
    return out


def config_label(cfg: object) -> str:
    """'E,C,warps,stages,hints,prefetch' of a triton.Config (the CMPNN_TRITON_CONFIGS syntax)."""
    kw = cfg.kwargs
    return (
        f"{kw['BLOCK_E']},{kw['BLOCK_C']},{cfg.num_warps},{cfg.num_stages},"
        f"{kw['HINTS']},{kw['PREFETCH']}"
    )


if os.environ.get("CMPNN_TRITON_PIPELINE", "0") == "1":
    _SPACE = _SPACE + PIPELINED
if os.environ.get("CMPNN_TRITON_CONFIGS"):
    _SPACE = parse_space(os.environ["CMPNN_TRITON_CONFIGS"])
if os.environ.get("CMPNN_TRITON_AUTOTUNE", "1") == "0":
    _SPACE = _SPACE[:1]
CONFIGS = [
    triton.Config(
        {"BLOCK_E": e, "BLOCK_C": c, "HINTS": h, "PREFETCH": pf, "STAGES": st},
        num_warps=w,
        num_stages=st,
    )
    for e, c, w, st, h, pf in _SPACE
]
_FLAGS = ["C", "NB", "BASIS", "HAS_MASK", "IDX64"]
TUNED = (
    {}
    if INTERPRET
    else {
        "fwd": triton.autotune(CONFIGS, key=_FLAGS + ["DO_SUM", "DO_SQ", "DO_MAX", "DO_MIN"])(
            fwd_kernel
        ),
        "bwd": triton.autotune(
            CONFIGS, key=_FLAGS + ["HAS_GS", "HAS_GQ", "HAS_GMAX", "HAS_GMIN", "REL_GRAD"]
        )(bwd_kernel),
    }
)
# One entry per autotuning run: {"kernel", "key", "best", "timings_ms": {config label: ms}};
# benchmarks write it beside their results.
TUNING_LOG: list[dict] = []


def launch(name: str, n_items: int, c: int, nz: int, args: list, meta: dict) -> None:
    """Launch with the autotuned variant on GPU or a fixed small tiling under the interpreter.

    Grid (items, column tiles, nz): items vary fastest, so one column tile's programs run
    together (see triton_kernels).  A new autotuning run is appended to ``TUNING_LOG``.
    """
    if INTERPRET:
        block_c = min(triton.next_power_of_2(c), 32)
        grid = (n_items, triton.cdiv(c, block_c), nz)
        KERNELS[name][grid](
            *args,
            **meta,
            BLOCK_E=4,
            BLOCK_C=block_c,
            HINTS=1,
            PREFETCH=INTERPRET_PREFETCH,
            STAGES=1,
        )
        return
    tuner = TUNED[name]
    seen = set(tuner.cache)
    tuner[lambda m: (n_items, triton.cdiv(c, m["BLOCK_C"]), nz)](*args, **meta)
    for key in set(tuner.cache) - seen:
        timings = getattr(tuner, "configs_timings", None) or {}
        dtype = next(a.dtype for a in args if torch.is_tensor(a) and a.is_floating_point())
        TUNING_LOG.append(
            {
                "kernel": name,
                "dtype": str(dtype).replace("torch.", ""),
                "flags": [k for k, v in meta.items() if v is True],
                "key": [str(k) for k in key],
                "best": config_label(tuner.cache[key]),
                "timings_ms": {
                    config_label(cfg): float(t[0] if isinstance(t, (list, tuple)) else t)
                    for cfg, t in timings.items()
                },
            }
        )
