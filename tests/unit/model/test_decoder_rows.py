"""Decoder.rows: the per-row logits with a backward on the rows that have a gradient only."""

from __future__ import annotations

import pytest
import torch

from cmpnn_dist.model.decoder import Decoder


def plain(dec: Decoder, h, z, query):
    """The same logits through plain autograd (every row's backward)."""
    return dec._logits(h, dec._query_part(z).index_select(0, query))


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("dense_grad", [False, True])
def test_rows_gradients_equal_plain_autograd(dense_grad, grouped):
    """Values and every gradient (h, z_q, both layers' weights and biases) equal plain
    autograd's, when a few rows have a gradient (the pruned case) and when all do."""
    torch.manual_seed(0)
    dec = Decoder(4, 5).double()
    m, batch = 30, 3
    h = torch.randn(m, 4, dtype=torch.float64, requires_grad=True)
    z = torch.randn(batch, 4, dtype=torch.float64, requires_grad=True)
    query = torch.randint(0, batch, (m,))
    if grouped:  # a pruned layer's rows: grouped by query (one broadcast add per query)
        query = torch.sort(query).values
    weight = torch.randn(m, dtype=torch.float64)
    if not dense_grad:
        weight[torch.randperm(m)[:25]] = 0  # 5 rows carry a gradient
    leaves = [h, z, *dec.parameters()]
    got_value = dec.rows(h, z, query)
    got = torch.autograd.grad((got_value * weight).sum(), leaves)
    want_value = plain(dec, h, z, query)
    want = torch.autograd.grad((want_value * weight).sum(), leaves)
    assert torch.allclose(got_value, want_value)
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-12)
    assert torch.autograd.gradcheck(lambda h, z: dec.rows(h, z, query), (h, z))


def test_rows_backward_skips_rows_without_gradient():
    """A row whose logit has no gradient gets an exactly zero state gradient, and the weight
    gradient is that of the rows that have one (computed on them alone)."""
    torch.manual_seed(1)
    dec = Decoder(3, 4).double()
    h = torch.randn(10, 3, dtype=torch.float64, requires_grad=True)
    z = torch.randn(2, 3, dtype=torch.float64)
    query = torch.tensor([0, 1] * 5)
    out = dec.rows(h, z, query)
    out[[2, 7]].sum().backward()
    assert torch.count_nonzero(h.grad.abs().sum(1)) <= 2
    assert torch.equal(h.grad[[0, 1, 3, 4, 5, 6, 8, 9]], torch.zeros(8, 3, dtype=torch.float64))
    w = dec.hidden.weight.grad.clone()
    dec.zero_grad()
    plain(dec, h[[2, 7]].detach(), z, query[[2, 7]]).sum().backward()
    assert torch.allclose(w, dec.hidden.weight.grad)


def test_rows_under_bf16_autocast_match_fp32():
    """Under CPU bf16 autocast the logits and the state gradient stay close to fp32's."""
    torch.manual_seed(2)
    dec = Decoder(8, 8)
    h = torch.randn(40, 8, requires_grad=True)
    z = torch.randn(4, 8)
    query = torch.randint(0, 4, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = dec.rows(h.to(torch.bfloat16), z, query)
    (g_low,) = torch.autograd.grad(low.float()[:6].sum(), h)
    high = dec.rows(h, z, query)
    (g_high,) = torch.autograd.grad(high[:6].sum(), h)
    assert low.dtype == torch.bfloat16
    assert torch.allclose(low.float(), high, atol=0.05)
    assert torch.allclose(g_low, g_high, atol=0.05)
