# ruff: noqa: ANN001, ANN201  (Triton kernel arguments are untyped pointers / scalars)
"""Triton kernels for fused relational message passing (used by :mod:`cmpnn_dist.ops.triton_mp`).

Notation: ``C = B * d`` columns per node (the B query states of a node are one contiguous row),
``tab`` is the gathered source table: ``x`` [N, C] for ``message="mul"`` or the per-basis
transforms ``y`` [N, nb, C] for ``message="basis"``.  The message of edge ``e = (s -r-> v)``:

* mul:   ``m_e[c] = tab[s, c] * w[r, c]``   (``w`` [R2, C]: the relation vectors laid out like
  a node row, so both gathers are contiguous C-wide loads)
* basis: ``m_e[c] = sum_k coef[r, k] * tab[s, k, c]``

Every kernel walks *work items* ``(start, end, slot)``: an edge range of one CSR row (rows with
more than ``max_edges`` edges are split, so hubs do not serialise a single program) whose
reduction is written to output row ``slot`` (the row itself; or, for a piece of a split row,
slot >= N, to a separate accumulator-dtype buffer that :mod:`cmpnn_dist.ops.triton_items`
combines afterwards).  Each program handles one item and one
tile of ``BLOCK_C`` columns, loading ``BLOCK_E`` gathered source rows at a time, so one gathered
row serves all B queries; accumulation is float32 for float32 / bfloat16 inputs (float64 stays
float64).

Memory traffic: the gathers move |E| x C elements per pass (9.75 GB for the biokg-scale graph in
float32), more than the L2 holds at once (93,773 nodes x 256 float32 columns = 96 MB).  The grid is
(items, column tiles) with items varying fastest, so one column tile's programs run together and
``BLOCK_C`` < C shrinks the gathered slice in flight; ``HINTS`` loads edge-index streams
``evict_first`` and gathered rows ``evict_last``; ``PREFETCH`` loads the next chunk's indices before
this chunk's gathers.  On an H200 the kernels behaved latency-bound rather than bandwidth-bound
(bfloat16 no faster than float32 before tuning): small steps (2 - 16 rows), few warps and full rows
won, and column tiles only for the relation gradient.  ``STAGES`` > 1 hands the edge loop to
Triton's software pipeliner (``tl.range(num_stages=STAGES)``), which issues the next steps' index
loads and row gathers as asynchronous copies to shared memory while the current step computes.  (A
hand-written two-deep register pipeline was tried first: ptxas sank the next step's loads below this
step's multiply-adds to reuse their registers, so the SASS kept no more loads in flight than
before.)  The space and launch live in :mod:`cmpnn_dist.ops.triton_tuning`; measurements in
``benchmarks/results/ops/fused_kernels_h200.md``.

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
    m2,
    C: tl.constexpr,
    NB: tl.constexpr,
    BASIS: tl.constexpr,
    NEED_MSG: tl.constexpr,
    ACC: tl.constexpr,
    TAB_EVICT: tl.constexpr,
):
    """Messages [BLOCK_E, BLOCK_C] of edges (s, r) (zeros unless NEED_MSG) and the gathered
    source rows ``sel`` = tab[s] (for BASIS the k_sel slice)."""
    if BASIS:
        msg = tl.zeros(m2.shape, dtype=ACC)
        sel = tl.zeros(m2.shape, dtype=ACC)
        for k in tl.static_range(NB):
            t = tl.load(
                tab_ptr + (s[:, None] * NB + k) * C + cols[None, :],
                mask=m2,
                other=0.0,
                eviction_policy=TAB_EVICT,
            ).to(ACC)
            if NEED_MSG:
                cf = tl.load(w_ptr + r * NB + k, mask=r >= 0, other=0.0).to(ACC)
                msg += t * cf[:, None]
            sel = tl.where(k == k_sel, t, sel)
    else:
        sel = tl.load(
            tab_ptr + s[:, None] * C + cols[None, :], mask=m2, other=0.0, eviction_policy=TAB_EVICT
        ).to(ACC)
        if NEED_MSG:
            wv = tl.load(w_ptr + r[:, None] * C + cols[None, :], mask=m2, other=0.0).to(ACC)
            msg = sel * wv
        else:
            msg = tl.zeros(m2.shape, dtype=ACC)
    return msg, sel


@triton.jit
def _fwd_edges(src_ptr, rel_ptr, keep_ptr, eids, end, HAS_MASK: tl.constexpr, EVICT: tl.constexpr):
    """Source, relation and kept-mask of the destination-sorted edges ``eids`` (< end)."""
    emask = eids < end
    if HAS_MASK:
        keep = tl.load(keep_ptr + eids, mask=emask, other=0, eviction_policy=EVICT)
        emask = emask & (keep != 0)
    s = tl.load(src_ptr + eids, mask=emask, other=0, eviction_policy=EVICT)
    r = tl.load(rel_ptr + eids, mask=emask, other=-1, eviction_policy=EVICT)
    return s, r, emask


@triton.jit
def _store_slot(row_ptr, piece_ptr, off, poff, val, cmask, slot, n_rows):
    """Store one reduced statistic ``val`` [BLOCK_C] of an item's slot: a whole row (slot <
    ``n_rows``) at ``row_ptr + off`` in the output dtype, a piece of a split row at
    ``piece_ptr + poff`` in the accumulator dtype (combined before the one rounding)."""
    lane_slot = slot + 0 * off  # per lane: the interpreter rejects a scalar-and-vector mask
    whole, piece = cmask & (lane_slot < n_rows), cmask & (lane_slot >= n_rows)
    tl.store(row_ptr + off, val.to(row_ptr.dtype.element_ty), mask=whole)
    tl.store(piece_ptr + poff, val.to(piece_ptr.dtype.element_ty), mask=piece)


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
    p_sum,
    p_sq,
    p_max,
    p_min,
    n_rows,
    C: tl.constexpr,
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
    HINTS: tl.constexpr,
    PREFETCH: tl.constexpr,
    STAGES: tl.constexpr,
):
    """One destination item x column tile: sum, sum of squares, max / min (+ arg edge ids).

    Item slots below ``n_rows`` are whole rows: their statistics go to ``o_*`` [n_rows, C] in
    the output dtype.  Slots ``n_rows + i`` are pieces of split hub rows: theirs go to
    ``p_*`` [pieces, C] in the accumulator dtype, so the pieces are combined before the one
    rounding to a 16-bit output (and max / min pick their arg among unrounded values).  The
    arg edge ids ``a_max`` / ``a_min`` [slots, C] keep every slot.
    PREFETCH: the next chunk's edge indices are loaded before this chunk's gathers, so the
    two round trips overlap instead of following each other.
    """
    IDX_EVICT: tl.constexpr = "evict_first" if HINTS else ""
    TAB_EVICT: tl.constexpr = "evict_last" if HINTS else ""
    item = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
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
    eids = start + tl.arange(0, BLOCK_E)
    s, r, emask = _fwd_edges(src_ptr, rel_ptr, keep_ptr, eids, end, HAS_MASK, IDX_EVICT)
    for _ in tl.range(start, end, BLOCK_E, num_stages=STAGES):
        if PREFETCH:
            s_n, r_n, emask_n = _fwd_edges(
                src_ptr, rel_ptr, keep_ptr, eids + BLOCK_E, end, HAS_MASK, IDX_EVICT
            )
        sx = s
        if IDX64:
            sx = s.to(tl.int64)
        m2 = emask[:, None] & cmask[None, :]
        msg, _ = _message(tab_ptr, w_ptr, sx, r, -1, cols, m2, C, NB, BASIS, True, ACC, TAB_EVICT)
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
        eids += BLOCK_E
        if PREFETCH:
            s, r, emask = s_n, r_n, emask_n
        else:
            s, r, emask = _fwd_edges(src_ptr, rel_ptr, keep_ptr, eids, end, HAS_MASK, IDX_EVICT)
    out = slot * C + cols
    pout = (slot - n_rows) * C + cols  # int64 like slot
    if DO_SUM:
        _store_slot(o_sum, p_sum, out, pout, tl.sum(acc_s, 0), cmask, slot, n_rows)
    if DO_SQ:
        _store_slot(o_sq, p_sq, out, pout, tl.sum(acc_q, 0), cmask, slot, n_rows)
    if DO_MAX:  # smallest edge id among the lanes holding the max
        mx = tl.max(acc_mx, 0)
        am = tl.min(tl.where(acc_mx == mx[None, :], arg_mx, 2147483647), 0)
        none = mx == float("-inf")
        _store_slot(o_max, p_max, out, pout, tl.where(none, 0.0, mx), cmask, slot, n_rows)
        tl.store(a_max + out, tl.where(none, -1, am), mask=cmask)
    if DO_MIN:
        mn = tl.min(acc_mn, 0)
        am = tl.min(tl.where(acc_mn == mn[None, :], arg_mn, 2147483647), 0)
        none = mn == float("inf")
        _store_slot(o_min, p_min, out, pout, tl.where(none, 0.0, mn), cmask, slot, n_rows)
        tl.store(a_min + out, tl.where(none, -1, am), mask=cmask)


@triton.jit
def _bwd_edges(
    gsrc_ptr,
    other_ptr,
    rel_ptr,
    eid_ptr,
    keep_ptr,
    eids,
    end,
    row,
    HAS_MASK: tl.constexpr,
    NEED_ORIG: tl.constexpr,
    REL_GRAD: tl.constexpr,
    EVICT: tl.constexpr,
):
    """(orig edge id, destination v, source s, relation r, kept mask) of backward edges."""
    emask = eids < end
    orig = eids
    if NEED_ORIG:
        orig = tl.load(eid_ptr + eids, mask=emask, other=0, eviction_policy=EVICT)
    if HAS_MASK:  # the keep mask permuted into this order: no load through ``orig``
        emask = emask & (tl.load(keep_ptr + eids, mask=emask, other=0, eviction_policy=EVICT) != 0)
    v = tl.load(other_ptr + eids, mask=emask, other=0, eviction_policy=EVICT)
    if REL_GRAD:  # item = a segment of relation `row`
        s = tl.load(gsrc_ptr + eids, mask=emask, other=0, eviction_policy=EVICT)
        r = tl.where(emask, row, -1)
    else:  # item = (part of) the out-edges of source node `row`
        s = tl.where(emask, row, 0)
        r = tl.load(rel_ptr + eids, mask=emask, other=-1, eviction_policy=EVICT)
    return orig, v, s, r, emask


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
    part_ptr,
    n_rows,
    C: tl.constexpr,
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
    HINTS: tl.constexpr,
    PREFETCH: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Backward of all four statistics, no atomics (PREFETCH as in :func:`fwd_kernel`).

    With ``G_e = gs[v_e] + 2 gq[v_e] * m_e + [amax[v_e] = e] gmax[v_e] + [amin[v_e] = e] gmin[v_e]``
    (v_e the destination of edge e, amax / amin the arg edge ids stored by the forward):

    * input gradient (``REL_GRAD=False``), items = rows u of the source-sorted CSR:
      mul ``gtab[u, c] = sum_e G_e[c] w[r_e, c]``;
      basis ``gtab[u, k, c] = sum_e G_e[c] coef[r_e, k]``
    * relation gradient (``REL_GRAD=True``), items = single-relation edge segments:
      mul ``P[seg, c] = sum_e G_e[c] tab[s_e, c]``;
      basis ``P[seg, k, c] = sum_e G_e[c] tab[s_e, k, c]``

    Slots below ``n_rows`` are whole rows, written to ``out_ptr`` [n_rows, NB, C] in the
    output dtype; the others (pieces of split rows; every relation segment, ``n_rows = 0``)
    to ``part_ptr`` [pieces, NB, C] in the accumulator dtype, summed before the one rounding.
    ``it_row`` is the item's source node (input gradient) or relation (relation gradient);
    ``gsrc_ptr`` the source of each edge (relation gradient only), ``other_ptr`` its
    destination, ``eid_ptr`` its destination-sorted edge id (arg tests), ``keep_ptr``
    the keep mask in the item order (``keep[eid]``).
    Grid: (items, column tiles, nb or 1).
    """
    IDX_EVICT: tl.constexpr = "evict_first" if HINTS else ""
    TAB_EVICT: tl.constexpr = "evict_last" if HINTS else ""
    item = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    k_sel = tl.program_id(2)
    cmask = cols < C
    start = tl.load(it_start + item)
    end = tl.load(it_end + item)
    slot = tl.load(it_slot + item).to(tl.int64)
    row = tl.load(it_row + item)
    acc = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
    NEED_ORIG: tl.constexpr = HAS_GMAX or HAS_GMIN
    eids = start + tl.arange(0, BLOCK_E)
    orig, v, s, r, emask = _bwd_edges(
        gsrc_ptr, other_ptr, rel_ptr, eid_ptr, keep_ptr, eids, end, row,
        HAS_MASK, NEED_ORIG, REL_GRAD, IDX_EVICT,
    )  # fmt: skip
    for _ in tl.range(start, end, BLOCK_E, num_stages=STAGES):
        if PREFETCH:
            orig_n, v_n, s_n, r_n, emask_n = _bwd_edges(
                gsrc_ptr, other_ptr, rel_ptr, eid_ptr, keep_ptr, eids + BLOCK_E, end, row,
                HAS_MASK, NEED_ORIG, REL_GRAD, IDX_EVICT,
            )  # fmt: skip
        sx, vx = s, v
        if IDX64:
            sx, vx = s.to(tl.int64), v.to(tl.int64)
        m2 = emask[:, None] & cmask[None, :]
        g = tl.zeros((BLOCK_E, BLOCK_C), dtype=ACC)
        vc = vx[:, None] * C + cols[None, :]  # destination rows of the output gradients
        if HAS_GS:
            g += tl.load(gs_ptr + vc, mask=m2, other=0.0, eviction_policy=TAB_EVICT).to(ACC)
        if HAS_GQ or REL_GRAD:  # the message only for the sum-of-squares term
            msg, sel = _message(
                tab_ptr, w_ptr, sx, r, k_sel, cols, m2, C, NB, BASIS, HAS_GQ, ACC, TAB_EVICT
            )
        if HAS_GQ:
            gq = tl.load(gq_ptr + vc, mask=m2, other=0.0, eviction_policy=TAB_EVICT).to(ACC)
            g += 2.0 * gq * msg
        if HAS_GMAX:  # the max gradient flows only through the stored arg edge
            am = tl.load(amax_ptr + vc, mask=m2, other=-1)
            hit = m2 & (am == orig[:, None])
            g += tl.load(gmax_ptr + vc, mask=hit, other=0.0).to(ACC)
        if HAS_GMIN:
            am = tl.load(amin_ptr + vc, mask=m2, other=-1)
            hit = m2 & (am == orig[:, None])
            g += tl.load(gmin_ptr + vc, mask=hit, other=0.0).to(ACC)
        if REL_GRAD:
            acc += g * sel
        else:
            if BASIS:
                cf = tl.load(w_ptr + r * NB + k_sel, mask=emask, other=0.0).to(ACC)
                acc += g * cf[:, None]
            else:
                wv = tl.load(w_ptr + r[:, None] * C + cols[None, :], mask=m2, other=0.0).to(ACC)
                acc += g * wv
        eids += BLOCK_E
        if PREFETCH:
            orig, v, s, r, emask = orig_n, v_n, s_n, r_n, emask_n
        else:
            orig, v, s, r, emask = _bwd_edges(
                gsrc_ptr, other_ptr, rel_ptr, eid_ptr, keep_ptr, eids, end, row,
                HAS_MASK, NEED_ORIG, REL_GRAD, IDX_EVICT,
            )  # fmt: skip
    out = (slot * NB + k_sel) * C + cols
    pout = ((slot - n_rows) * NB + k_sel) * C + cols  # int64 like slot
    _store_slot(out_ptr, part_ptr, out, pout, tl.sum(acc, 0), cmask, slot, n_rows)


KERNELS = {"fwd": fwd_kernel, "bwd": bwd_kernel}
