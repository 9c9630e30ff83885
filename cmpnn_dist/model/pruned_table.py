"""The table of visited states of pruned propagation (:mod:`cmpnn_dist.model.pruned`) and its
update after each layer, at one copy of the table per layer in training and none in evaluation.

A layer reads the states of its P visited packed rows from the table h [M, d] and, after the
update, writes P states back, appending the keys it visited first:

    h_p   = h[rows]     (the P rows the layer updates; 0 for the keys it visits first)
    h'    = pad(h with h[rows] := 0, size) + scatter(rows', out)      [size, d], size >= M

With autograd this is :func:`split_rows` (one custom function: the read rows and the padded
table with those rows cleared) followed by :func:`write_rows` (the layer's output copied into
those rows in place).  The backward then costs one copy of the table's gradient per
layer (the padded table's gradient with the read rows' gradients written into it), where the
composition of ``index_select`` (read) and ``cat`` + ``index_put_`` (write) costs four: a
clone, a zeroed buffer, an index_add into it and their sum.  Without autograd the table
lives in a buffer whose capacity doubles and the P rows are written in place
(:func:`merge_rows`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import FunctionCtx, once_differentiable


def read_rows(h: Tensor, rows: Tensor) -> Tensor:
    """float [P, d]: ``h[rows]`` (h [m, d]; rows int64 [P]), 0 where a row is -1 (a key not
    visited yet).  One gather and a fill of the new rows (no [P, d] zeros to copy into)."""
    out = h.index_select(0, rows.clamp(min=0))
    return out.index_fill_(0, (rows < 0).nonzero().squeeze(1), 0)


class _SplitRows(torch.autograd.Function):
    """(h [m, ...], rows int64 [P] distinct or -1, size >= m) -> (read_rows(h, rows) [P, ...],
    table [size, ...]: h padded with zero rows, the rows read set to 0)."""

    @staticmethod
    def forward(ctx: FunctionCtx, h: Tensor, rows: Tensor, size: int) -> tuple[Tensor, Tensor]:
        at = (rows >= 0).nonzero().squeeze(1)
        read = rows.index_select(0, at)
        table = h.new_empty((size, *h.shape[1:]))  # written once: h, then zeros
        table[: h.shape[0]] = h
        table[h.shape[0] :] = 0
        table.index_fill_(0, read, 0)
        ctx.save_for_backward(at, read)
        ctx.shape = h.shape
        ctx.set_materialize_grads(False)
        return read_rows(h, rows), table

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, g_taken: Tensor | None, g_table: Tensor | None):
        at, read = ctx.saved_tensors
        if g_table is None and g_taken is None:
            return None, None, None
        if g_table is None:
            grad = g_taken.new_zeros(ctx.shape)
        else:
            grad = g_table[: ctx.shape[0]].clone()
        if g_taken is None:
            return grad.index_fill_(0, read, 0), None, None
        return grad.index_copy_(0, read, g_taken.index_select(0, at).to(grad.dtype)), None, None


def split_rows(h: Tensor, rows: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """``(read_rows(h, rows), table)``: the rows ``rows`` (int64 [P], distinct, -1 for a key
    not visited yet) of h [m, d], and h padded with zero rows to ``size`` rows with the rows
    read set to 0, to be completed with :func:`write_rows`.  Differentiable in h (one copy
    forward and backward)."""
    return _SplitRows.apply(h, rows, size)


class _WriteRows(torch.autograd.Function):
    """(table [size, ...] from split_rows, rows int64 [P] distinct, out [P, ...]) -> table with
    ``table[rows] = out``, in place.  Backward: the table's gradient passes through unchanged
    (not cleared at ``rows``: the rows written are the rows split_rows cleared or appended,
    whose gradients its backward overwrites or drops), out's is its rows'."""

    @staticmethod
    def forward(ctx: FunctionCtx, table: Tensor, rows: Tensor, out: Tensor) -> Tensor:
        ctx.mark_dirty(table)
        ctx.save_for_backward(rows)
        ctx.out_dtype = out.dtype
        return table.index_copy_(0, rows, out.to(table.dtype))

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, grad: Tensor):
        (rows,) = ctx.saved_tensors
        return grad, None, grad.index_select(0, rows).to(ctx.out_dtype)


def write_rows(table: Tensor, rows: Tensor, out: Tensor) -> Tensor:
    """``table`` (a fresh table of :func:`split_rows`) with rows ``rows`` (int64 [P], the rows
    read there, or appended) set to ``out`` [P, d], in place (an index_copy_, not the slower
    index_add_ or an index_put_ whose backward clones the table's gradient)."""
    return _WriteRows.apply(table, rows, out)


def merge_rows(
    buffers: dict, name: str, old: Tensor, rows: Tensor, new: Tensor, size: int
) -> Tensor:
    """``old`` [m, ...] grown to ``size`` rows with ``new`` written at ``rows`` (every row in
    [m, size) is among them).  With autograd: out of place.  Without (evaluation): in place in
    a buffer kept in ``buffers[name]`` whose capacity doubles, so a layer writes its P rows
    instead of copying all M visited ones."""
    if torch.is_grad_enabled():
        pad = old.new_zeros((size - old.shape[0], *old.shape[1:]), dtype=new.dtype)
        # in place on cat's fresh output (cat's backward needs no saved output): one copy
        return torch.cat([old.to(new.dtype), pad]).index_put_((rows,), new)
    buf = buffers.get(name)
    if (
        buf is None
        or buf.dtype != new.dtype
        or buf.shape[0] < size
        or old.data_ptr() != buf.data_ptr()
    ):
        grown = new.new_empty((max(size, 2 * old.shape[0]), *new.shape[1:]))
        grown[: old.shape[0]] = old
        buf = buffers[name] = grown
    buf.index_copy_(0, rows, new)
    return buf[:size]
