"""The visited-state table's update (cmpnn_dist.model.pruned_table) against plain autograd."""

from __future__ import annotations

import pytest
import torch

from cmpnn_dist.model.pruned_table import merge_rows, split_rows, write_rows


def reference(h, size, new_rows, out):
    """The write it replaces: cat + index_put."""
    pad = h.new_zeros(size - h.shape[0], h.shape[1])
    return torch.cat([h, pad]).index_put((new_rows,), out)


@pytest.mark.parametrize("use", ["both", "taken", "table"])
def test_split_rows_gradcheck(use):
    """Values and gradients of split_rows followed by write_rows of the layer's output equal
    the index_select + cat + index_put composition, whichever outputs are used; gradcheck."""
    gen = torch.Generator().manual_seed(0)
    m, size, d = 7, 10, 3
    rows = torch.tensor([5, -1, 0, 3, -1, -1])  # read and updated; -1: appended as 7-9
    new_rows = torch.tensor([5, 7, 0, 3, 8, 9])
    h = torch.randn(m, d, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(d, d, generator=gen, dtype=torch.float64, requires_grad=True)
    extra = torch.randn(3, d, generator=gen, dtype=torch.float64)

    def layer(taken):  # an update that depends on the rows read
        return torch.tanh(taken @ w) + extra.repeat(2, 1)

    def update(taken):  # the layer's output for the 6 rows it writes
        if use == "table":  # one that ignores the rows read
            return extra.repeat(2, 1) @ w
        return layer(taken)

    def ours(h, w):
        taken, table = split_rows(h, rows, size)
        if use == "taken":  # only the rows read are used
            return torch.tanh(taken @ w)
        return write_rows(table, new_rows, update(taken))

    def theirs(h, w):
        taken = torch.where((rows >= 0).unsqueeze(1), h[rows.clamp(min=0)], 0)
        if use == "taken":
            return torch.tanh(taken @ w)
        return reference(h, size, new_rows, update(taken))

    assert torch.allclose(ours(h, w), theirs(h, w))
    weights = torch.randn_like(ours(h, w))
    g_ours = torch.autograd.grad((ours(h, w) * weights).sum(), (h, w), allow_unused=True)
    g_theirs = torch.autograd.grad((theirs(h, w) * weights).sum(), (h, w), allow_unused=True)
    for a, b in zip(g_ours, g_theirs, strict=True):
        assert (a is None and b is None) or torch.allclose(a, b)
    assert torch.autograd.gradcheck(ours, (h, w))


def test_merge_rows_in_place_without_autograd():
    """Without autograd merge_rows writes into a buffer that it grows by doubling (the same
    storage while it fits), with the same values as with autograd."""
    old = torch.arange(6.0).reshape(3, 2)
    with torch.no_grad():
        a, buffer = merge_rows(None, old, torch.tensor([1, 3]), torch.ones(2, 2), 4)
        b, buffer = merge_rows(buffer, a, torch.tensor([0, 4]), 2 * torch.ones(2, 2), 5)
    assert a.data_ptr() == b.data_ptr() and buffer.shape[0] >= 6
    want = torch.cat([old, torch.zeros(2, 2)])
    want[[1, 3]] = 1
    want[[0, 4]] = 2
    assert torch.equal(b, want)
    step, none = merge_rows(None, old, torch.tensor([1, 3]), torch.ones(2, 2), 4)
    assert none is None
    assert torch.equal(
        merge_rows(None, step, torch.tensor([0, 4]), 2 * torch.ones(2, 2), 5)[0], want
    )


@pytest.mark.parametrize("grad", [False, True])
def test_visited_table_against_a_dict(grad):
    """Three layers' reads and writes of the visited table against a dict of key -> state:
    a read returns the visited states (0 for a new key) and each key's row after the write,
    new keys get the next rows in the order read; with and without autograd."""
    from cmpnn_dist.model.pruned_table import Visited

    gen = torch.Generator().manual_seed(0)
    first = torch.tensor([5, 2])
    h0 = torch.randn(2, 3, generator=gen, dtype=torch.float64, requires_grad=grad)
    table = Visited.start(first, h0, h0.sum(1), num_keys=12)
    want = {5: h0[0].detach(), 2: h0[1].detach()}
    order = [5, 2]
    with torch.set_grad_enabled(grad):
        for keys in ([1, 2, 7], [0, 5, 7, 11], [2, 3]):
            keys = torch.tensor(keys)
            h, rows, new_keys, _table = table.read(keys)
            for i, key in enumerate(keys.tolist()):
                assert torch.equal(h[i].detach(), want.get(key, torch.zeros(3, dtype=h.dtype)))
            fresh = [k for k in keys.tolist() if k not in want]
            assert new_keys.tolist() == fresh
            order += fresh
            assert rows.tolist() == [order.index(k) for k in keys.tolist()]
            out = h * 2 + 1
            table.write(rows, new_keys, _table, out, out.sum(1))
            for i, key in enumerate(keys.tolist()):
                want[key] = out[i].detach()
    assert table.keys.tolist() == order
    assert torch.equal(table.h.detach(), torch.stack([want[k] for k in order]))
    assert torch.equal(table.prio.detach(), table.h.detach().sum(1))
    slot = torch.full((12,), -1)
    slot[torch.tensor(order)] = torch.arange(len(order))
    assert torch.equal(table.slot.long(), slot)
    if grad:  # d/dh0 of the sum: 2 per layer that read and rewrote the state (5: one, 2: two)
        table.h.sum().backward()
        want_grad = torch.tensor([[2.0] * 3, [4.0] * 3], dtype=torch.float64)
        assert torch.equal(h0.grad, want_grad)
