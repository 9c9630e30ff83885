"""The table of visited states of pruned propagation (:mod:`cmpnn_dist.model.pruned`) and its
update after each layer, at one copy of the table per layer in training and none in evaluation.

The table is a :class:`Visited` (keys, states, priorities, the key-to-row map).  A layer reads
the states of its P packed rows from h [M, d] (:meth:`Visited.read`) and, after the update,
writes P states back, appending the keys it visited first (:meth:`Visited.write`):

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

from dataclasses import dataclass

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
    buffer: Tensor | None, old: Tensor, rows: Tensor, new: Tensor, size: int
) -> tuple[Tensor, Tensor | None]:
    """``(table, buffer)``: ``old`` [m, ...] grown to ``size`` rows with ``new`` written at
    ``rows`` (every row in [m, size) is among them).  With autograd: out of place (``buffer``
    passed through).  Without (evaluation): in place in ``buffer`` (the one this returned for
    ``old``, or None), whose capacity doubles when it is outgrown, so a layer writes its P rows
    instead of copying all M visited ones."""
    if torch.is_grad_enabled():
        pad = old.new_zeros((size - old.shape[0], *old.shape[1:]), dtype=new.dtype)
        # in place on cat's fresh output (cat's backward needs no saved output): one copy
        return torch.cat([old.to(new.dtype), pad]).index_put_((rows,), new), buffer
    if (
        buffer is None
        or buffer.dtype != new.dtype
        or buffer.shape[0] < size
        or old.data_ptr() != buffer.data_ptr()
    ):
        grown = new.new_empty((max(size, 2 * old.shape[0]), *new.shape[1:]))
        grown[: old.shape[0]] = old
        buffer = grown
    buffer.index_copy_(0, rows, new)
    return buffer[:size], buffer


@dataclass
class Visited:
    """The visited-state table of one pruned forward over B queries and a graph of N nodes.

    Attributes:
        keys: int64 [M], the visited (query, node) keys ``b N + v`` in order of first visit.
        h: float [M, d], their states.
        prio: float [M], their priorities.
        slot: int32 (int64 when B N >= 2^31 - 1) [B N], the row of each key, -1 if unvisited.
        h_buffer, prio_buffer: the storage of h and prio without autograd (:func:`merge_rows`).
    """

    keys: Tensor
    h: Tensor
    prio: Tensor
    slot: Tensor
    h_buffer: Tensor | None = None
    prio_buffer: Tensor | None = None

    @classmethod
    def start(cls, keys: Tensor, h: Tensor, prio: Tensor, num_keys: int) -> Visited:
        """The table of the first visited ``keys`` (int64 [M], distinct, < ``num_keys``)."""
        dtype = torch.int32 if num_keys < 2**31 - 1 else torch.long
        slot = torch.full((num_keys,), -1, dtype=dtype, device=keys.device)
        slot[keys] = torch.arange(keys.numel(), device=keys.device, dtype=dtype)
        return cls(keys, h, prio, slot)

    def read(self, keys: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """What a layer over the (query, node) ``keys`` (int64 [P], distinct) reads:
        ``(h [P, d], rows int64 [P], new_keys, table)``: their states (0 for a key not visited
        yet), the row of each after :meth:`write` (the new keys appended in order), the new
        keys, and with autograd the table the rows are read from and cleared in
        (:func:`split_rows`; its backward writes each row's gradient once, where autograd's
        accumulating index_put of ``h[rows.clamp(min=0)]`` sends every new row to row 0: on
        CUDA 80 % of a training step in its duplicate-serialising kernel), else None."""
        rows = self.slot[keys].long()
        found = rows >= 0
        m, new = self.keys.numel(), ~found
        new_keys = keys[new]
        size = m + new_keys.numel()
        table = None
        if torch.is_grad_enabled():
            h, table = split_rows(self.h, rows, size)
        else:
            h = read_rows(self.h, rows)
        return h, torch.where(found, rows, m + torch.cumsum(new, 0) - 1), new_keys, table

    def write(
        self, rows: Tensor, new_keys: Tensor, table: Tensor | None, h: Tensor, prio: Tensor
    ) -> None:
        """Store a layer's states h float [P, d] and priorities prio [P] at ``rows``,
        appending ``new_keys`` (``rows``, ``new_keys`` and ``table`` from :meth:`read`)."""
        m = self.keys.numel()
        size = m + new_keys.numel()
        self.slot[new_keys] = torch.arange(m, size, device=self.slot.device).to(self.slot.dtype)
        if table is None:
            self.h, self.h_buffer = merge_rows(self.h_buffer, self.h, rows, h, size)
        else:  # the rows read and cleared by split_rows, and the appended ones
            self.h = write_rows(table.to(h.dtype), rows, h)
        self.prio, self.prio_buffer = merge_rows(self.prio_buffer, self.prio, rows, prio, size)
        self.keys = torch.cat([self.keys, new_keys])
