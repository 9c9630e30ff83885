# ruff: noqa: ANN001, ANN201  (Triton kernel arguments are untyped pointers / scalars)
"""Triton kernels for fused relational message passing (used by :mod:`cmpnn_dist.ops.triton_mp`).

Notation: ``C = B * d`` columns per node (the B query states of a node are one contiguous row),
``tab`` is the gathered source table: ``x`` [N, C] for ``message="mul"`` or the per-basis
transforms ``y`` [N, nb, C] for ``message="basis"``.  The message of edge ``e = (s -r-> v)``:

* mul:   ``m_e[c] = tab[s, c] * w[r, c]``     with ``w[r, c] = rel[b(c) * sb + r * sr + j(c)]``
* basis: ``m_e[c] = sum_k coef[r, k] * tab[s, k, c]``

Every kernel walks *work items* ``(start, end, slot)``: an edge range of one CSR row (rows with
more than ``max_edges`` edges are split, so hubs do not serialise a single program) whose
reduction is written to output row ``slot`` (the row itself, or a partial slot >= N that
:func:`cmpnn_dist.ops.triton_mp` combines afterwards).  Each program handles one item and one
tile of ``BLOCK_C`` columns, loading ``BLOCK_E`` gathered source rows at a time, so one gathered
row serves all B queries; accumulation is float32 for float32 / bfloat16 inputs (float64 stays
float64).

Kernels are defined under ``TRITON_INTERPRET=1`` when no CUDA device is present, so the same
code runs (slowly) on CPU for the tests.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # the Triton interpreter is the only way to run on CPU
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _message(
    tab_ptr,
    w_ptr,
    s,
    r,
    k_sel,
    cols,
    b_idx,
    j_idx,
    m2,
    C: tl.constexpr,
    NB: tl.constexpr,
    w_sb,
    w_sr,
    BASIS: tl.constexpr,
    ACC: tl.constexpr,
):
    """Messages [BLOCK_E, BLOCK_C] of edges (s, r); for BASIS also tab[s, k_sel] (the k slice)."""
    if BASIS:
        msg = tl.zeros(m2.shape, dtype=ACC)
        sel = tl.zeros(m2.shape, dtype=ACC)
        for k in tl.static_range(NB):
            t = tl.load(tab_ptr + (s[:, None] * NB + k) * C + cols[None, :], mask=m2, other=0.0)
            t = t.to(ACC)
            cf = tl.load(w_ptr + r * NB + k, mask=r >= 0, other=0.0).to(ACC)
            msg += t * cf[:, None]
            sel = tl.where(k == k_sel, t, sel)
    else:
        sel = tl.load(tab_ptr + s[:, None] * C + cols[None, :], mask=m2, other=0.0).to(ACC)
        wv = tl.load(
            w_ptr + r[:, None] * w_sr + b_idx[None, :] * w_sb + j_idx[None, :], mask=m2, other=0.0
        ).to(ACC)
        msg = sel * wv
    return msg, sel


@triton.jit
def fwd_kernel(
    it_start,
    it_end,
    it_slot,
    src_ptr,
    rel_ptr,
    keep_ptr,
    tab_ptr,
    w_ptr,
    o_sum,
    o_sq,
    o_max,
    o_min,
    a_max,
    a_min,
    C: tl.constexpr,
    D: tl.constexpr,
    w_sb,
    w_sr,
    NB: tl.constexpr,
    BASIS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    DO_SUM: tl.constexpr,
    DO_SQ: tl.constexpr,
    DO_MAX: tl.constexpr,
    DO_MIN: tl.constexpr,
    IDX64: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """One destination item x column tile: sum, sum of squares, max / min (+ arg edge ids)."""
    item = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    b_idx = cols // D
    j_idx = cols % D
    start = tl.load(it_start + item)
    end = tl.load(it_end + item)
    slot = tl.load(it_slot + item).to(tl.int64)
    acc_s = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
    acc_q = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
    # max / min: running value and arg edge per lane (reduced once at the end; measured
    # faster on an H200 than reducing every chunk into 1D accumulators)
    acc_mx = tl.full((BLOCK_E, BLOCK_C), float("-inf"), dtype=ACC)
    acc_mn = tl.full((BLOCK_E, BLOCK_C), float("inf"), dtype=ACC)
    arg_mx = tl.full((BLOCK_E, BLOCK_C), -1, dtype=tl.int32)
    arg_mn = tl.full((BLOCK_E, BLOCK_C), -1, dtype=tl.int32)
    for e0 in range(start, end, BLOCK_E):
        eids = e0 + tl.arange(0, BLOCK_E)
        emask = eids < end
        if HAS_MASK:
            emask = emask & (tl.load(keep_ptr + eids, mask=emask, other=0) != 0)
        s = tl.load(src_ptr + eids, mask=emask, other=0)
        if IDX64:
            s = s.to(tl.int64)
        r = tl.load(rel_ptr + eids, mask=emask, other=-1)
        m2 = emask[:, None] & cmask[None, :]
        msg, _ = _message(
            tab_ptr, w_ptr, s, r, -1, cols, b_idx, j_idx, m2, C, NB, w_sb, w_sr, BASIS, ACC
        )
        if DO_SUM:
            acc_s += msg
        if DO_SQ:
            acc_q += msg * msg
        if DO_MAX:  # strict > keeps each lane's earliest edge among ties
            v = tl.where(m2, msg, float("-inf"))
            upd = v > acc_mx
            acc_mx = tl.where(upd, v, acc_mx)
            arg_mx = tl.where(upd, eids[:, None], arg_mx)
        if DO_MIN:
            v = tl.where(m2, msg, float("inf"))
            upd = v < acc_mn
            acc_mn = tl.where(upd, v, acc_mn)
            arg_mn = tl.where(upd, eids[:, None], arg_mn)
    out = slot * C + cols
    if DO_SUM:
        tl.store(o_sum + out, tl.sum(acc_s, 0).to(o_sum.dtype.element_ty), mask=cmask)
    if DO_SQ:
        tl.store(o_sq + out, tl.sum(acc_q, 0).to(o_sq.dtype.element_ty), mask=cmask)
    if DO_MAX:  # smallest edge id among the lanes holding the max
        mx = tl.max(acc_mx, 0)
        am = tl.min(tl.where(acc_mx == mx[None, :], arg_mx, 2147483647), 0)
        none = mx == float("-inf")
        tl.store(o_max + out, tl.where(none, 0.0, mx).to(o_max.dtype.element_ty), mask=cmask)
        tl.store(a_max + out, tl.where(none, -1, am), mask=cmask)
    if DO_MIN:
        mn = tl.min(acc_mn, 0)
        am = tl.min(tl.where(acc_mn == mn[None, :], arg_mn, 2147483647), 0)
        none = mn == float("inf")
        tl.store(o_min + out, tl.where(none, 0.0, mn).to(o_min.dtype.element_ty), mask=cmask)
        tl.store(a_min + out, tl.where(none, -1, am), mask=cmask)


@triton.jit
def bwd_kernel(
    it_row,
    it_start,
    it_end,
    it_slot,
    gsrc_ptr,
    other_ptr,
    rel_ptr,
    eid_ptr,
    keep_ptr,
    tab_ptr,
    w_ptr,
    gs_ptr,
    gq_ptr,
    amax_ptr,
    gmax_ptr,
    amin_ptr,
    gmin_ptr,
    out_ptr,
    C: tl.constexpr,
    D: tl.constexpr,
    w_sb,
    w_sr,
    NB: tl.constexpr,
    BASIS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_GS: tl.constexpr,
    HAS_GQ: tl.constexpr,
    HAS_GMAX: tl.constexpr,
    HAS_GMIN: tl.constexpr,
    REL_GRAD: tl.constexpr,
    IDX64: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Backward of all four statistics, no atomics.

    With ``G_e = gs[v_e] + 2 gq[v_e] * m_e + [amax[v_e] = e] gmax[v_e] + [amin[v_e] = e] gmin[v_e]``
    (v_e the destination of edge e, amax / amin the arg edge ids stored by the forward):

    * input gradient (``REL_GRAD=False``), items = rows u of the source-sorted CSR:
      mul ``gtab[u, c] = sum_e G_e[c] w[r_e, c]``;
      basis ``gtab[u, k, c] = sum_e G_e[c] coef[r_e, k]``
    * relation gradient (``REL_GRAD=True``), items = single-relation edge segments:
      mul ``P[seg, c] = sum_e G_e[c] tab[s_e, c]``;
      basis ``P[seg, k, c] = sum_e G_e[c] tab[s_e, k, c]``

    ``it_row`` is the item's source node (input gradient) or relation (relation gradient);
    ``gsrc_ptr`` the source of each edge (relation gradient only), ``other_ptr`` its
    destination, ``eid_ptr`` its destination-sorted edge id (keep-mask and arg tests).
    Grid: (items, column tiles, nb or 1).
    """
    item = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    k_sel = tl.program_id(2)
    cmask = cols < C
    b_idx = cols // D
    j_idx = cols % D
    start = tl.load(it_start + item)
    end = tl.load(it_end + item)
    slot = tl.load(it_slot + item).to(tl.int64)
    row = tl.load(it_row + item)
    acc = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
    for e0 in range(start, end, BLOCK_E):
        eids = e0 + tl.arange(0, BLOCK_E)
        emask = eids < end
        if HAS_MASK or HAS_GMAX or HAS_GMIN:
            orig = tl.load(eid_ptr + eids, mask=emask, other=0)
        if HAS_MASK:
            emask = emask & (tl.load(keep_ptr + orig, mask=emask, other=0) != 0)
        v = tl.load(other_ptr + eids, mask=emask, other=0)
        if REL_GRAD:  # item = a segment of relation `row`
            s = tl.load(gsrc_ptr + eids, mask=emask, other=0)
            r = tl.where(emask, row, -1)
        else:  # item = (part of) the out-edges of source node `row`
            s = tl.where(emask, row, 0)
            r = tl.load(rel_ptr + eids, mask=emask, other=-1)
        if IDX64:
            s = s.to(tl.int64)
            v = v.to(tl.int64)
        m2 = emask[:, None] & cmask[None, :]
        g = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
        if HAS_GS:
            g += tl.load(gs_ptr + v[:, None] * C + cols[None, :], mask=m2, other=0.0).to(ACC)
        if HAS_GQ or REL_GRAD:
            msg, sel = _message(
                tab_ptr, w_ptr, s, r, k_sel, cols, b_idx, j_idx, m2, C, NB, w_sb, w_sr, BASIS, ACC
            )
        if HAS_GQ:
            gq = tl.load(gq_ptr + v[:, None] * C + cols[None, :], mask=m2, other=0.0).to(ACC)
            g += 2.0 * gq * msg
        if HAS_GMAX:  # the max gradient flows only through the stored arg edge
            am = tl.load(amax_ptr + v[:, None] * C + cols[None, :], mask=m2, other=-1)
            hit = m2 & (am == orig[:, None])
            g += tl.load(gmax_ptr + v[:, None] * C + cols[None, :], mask=hit, other=0.0).to(ACC)
        if HAS_GMIN:
            am = tl.load(amin_ptr + v[:, None] * C + cols[None, :], mask=m2, other=-1)
            hit = m2 & (am == orig[:, None])
            g += tl.load(gmin_ptr + v[:, None] * C + cols[None, :], mask=hit, other=0.0).to(ACC)
        if REL_GRAD:
            acc += g * sel
        else:
            if BASIS:
                cf = tl.load(w_ptr + r * NB + k_sel, mask=emask, other=0.0).to(ACC)
                acc += g * cf[:, None]
            else:
                wv = tl.load(
                    w_ptr + r[:, None] * w_sr + b_idx[None, :] * w_sb + j_idx[None, :],
                    mask=m2,
                    other=0.0,
                ).to(ACC)
                acc += g * wv
    out = (slot * NB + k_sel) * C + cols
    tl.store(out_ptr + out, tl.sum(acc, 0).to(out_ptr.dtype.element_ty), mask=cmask)


# Small autotune lists (GPU only): gathered rows per step x columns per program x warps.
# CMPNN_TRITON_AUTOTUNE=0 keeps only the first (saves compile time, e.g. in tests).
_CONFIGS = [
    triton.Config({"BLOCK_E": be, "BLOCK_C": bc}, num_warps=nw)
    for be, bc, nw in [
        (16, 256, 4),
        (8, 256, 4),
        (32, 256, 4),
        (32, 256, 8),
        (64, 256, 8),
        (16, 128, 4),
    ]
]
if os.environ.get("CMPNN_TRITON_AUTOTUNE", "1") == "0":
    _CONFIGS = _CONFIGS[:1]
_FLAGS = ["C", "D", "NB", "BASIS", "HAS_MASK", "IDX64"]
_BWD_FLAGS = ["HAS_GS", "HAS_GQ", "HAS_GMAX", "HAS_GMIN", "REL_GRAD"]
TUNED = (
    {}
    if INTERPRET
    else {
        "fwd": triton.autotune(_CONFIGS, key=_FLAGS + ["DO_SUM", "DO_SQ", "DO_MAX", "DO_MIN"])(
            fwd_kernel
        ),
        "bwd": triton.autotune(
            _CONFIGS, key=_FLAGS + ["HAS_GS", "HAS_GQ", "HAS_GMAX", "HAS_GMIN", "REL_GRAD"]
        )(bwd_kernel),
    }
)
KERNELS = {"fwd": fwd_kernel, "bwd": bwd_kernel}
