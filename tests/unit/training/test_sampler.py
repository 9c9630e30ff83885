"""QuerySampler: world-size invariance, strict negatives, exact state round trip, no global RNG."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from cmpnn_dist.training.sampler import QuerySampler

N, R = 30, 3


def _facts(num: int = 101, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    h = torch.randint(0, N, (num,), generator=g)
    r = torch.randint(0, R, (num,), generator=g)
    t = torch.randint(0, N, (num,), generator=g)
    return torch.unique(torch.stack([h, r, t], 1), dim=0)


def _sampler(facts, world_size=1, rank=0, B=8, k=5, seed=3, **kw) -> QuerySampler:
    return QuerySampler(facts, N, R, B, k, seed, rank=rank, world_size=world_size, **kw)


def _epoch(s: QuerySampler) -> list:
    fields = ("queries", "negatives", "global_queries", "global_negatives")
    return [tuple(getattr(b, f).clone() for f in fields) for b in s]


@pytest.mark.parametrize("world_size", [2, 4])
def test_global_batches_same_for_any_world_size(world_size):
    facts = _facts()
    ref = _sampler(facts)
    shards = [_sampler(facts, world_size, rank) for rank in range(world_size)]
    for epoch in range(2):
        ref.set_epoch(epoch)
        for s in shards:
            s.set_epoch(epoch)
        ref_batches = _epoch(ref)
        per_rank = [_epoch(s) for s in shards]
        assert len(ref_batches) == len(facts) // 8  # last incomplete batch dropped
        for i, (q, neg, gq, gneg) in enumerate(ref_batches):
            parts = [per_rank[r][i] for r in range(world_size)]
            assert all(p[0].shape == (8 // world_size, 3) for p in parts)
            assert torch.equal(torch.cat([p[0] for p in parts]), q)  # contiguous slices
            assert torch.equal(torch.cat([p[1] for p in parts]), neg)
            for p in parts:
                assert torch.equal(p[2], gq)
                assert torch.equal(p[3], gneg)
            assert torch.equal(gq, q)  # one worker: its share is the global batch
            assert torch.equal(gneg, neg)


def test_epochs_and_seeds_differ_and_cover_the_facts():
    facts = _facts()
    s = _sampler(facts)
    e0 = torch.cat([b[2] for b in _epoch(s)])
    s.set_epoch(1)
    e1 = torch.cat([b[2] for b in _epoch(s)])
    assert not torch.equal(e0, e1)
    other = torch.cat([b[2] for b in _epoch(_sampler(facts, seed=4))])
    assert not torch.equal(e0, other)
    # every query is a training fact, either as is or converted to head prediction
    fwd = {tuple(x) for x in facts.tolist()}
    flipped = 0
    for h, r, t in e0.tolist():
        if r < R:
            assert (h, r, t) in fwd
        else:
            assert (t, r - R, h) in fwd
            flipped += 1
    assert 0.25 < flipped / len(e0) < 0.75
    assert len({tuple(x) for x in e0.tolist()}) == len(e0)  # a permutation: no repeats


def test_negatives_are_strict():
    # dense graph: node 0 with relation 0 has most nodes as true tails
    facts = torch.tensor([[0, 0, t] for t in range(1, N - 2)] + [[5, 1, 6], [7, 2, 8], [9, 1, 4]])
    extra = torch.tensor([[1, 2, 3], [3, 2, 1]])  # filter-only facts
    s = QuerySampler(facts, N, R, 4, 16, 0, filter_triples=extra)
    true = {tuple(x) for x in torch.cat([facts, extra]).tolist()}
    true |= {(t, r + R, h) for h, r, t in list(true)}
    seen = 0
    for epoch in range(4):
        s.set_epoch(epoch)
        for b in s:
            for (h, r, _t), negs in zip(b.queries.tolist(), b.negatives.tolist(), strict=True):
                for v in negs:
                    assert (h, r, v) not in true
                    seen += 1
                if (h, r) == (0, 0):  # only N-2, N-1 and 0 are not true tails of (0, 0)
                    assert set(negs) <= {0, N - 2, N - 1}
    assert seen > 0


def test_state_round_trip_mid_epoch_continues_exactly():
    facts = _facts()
    a = _sampler(facts, world_size=2, rank=1)
    a.set_epoch(2)
    for _ in range(3):
        a.next_batch()
    state = a.state_dict()
    rest_a = _epoch(a)
    b = _sampler(facts, world_size=2, rank=1)  # fresh object, different position
    b.next_batch()
    b.load_state_dict(state)
    assert (b.epoch, b.step) == (2, 3)
    rest_b = _epoch(b)
    assert len(rest_a) == len(rest_b) == len(a) - 3
    for x, y in zip(rest_a, rest_b, strict=True):
        assert all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
    assert a.next_batch() is None and a.exhausted


def test_state_mismatch_is_an_error():
    facts = _facts()
    state = _sampler(facts, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed"):
        _sampler(facts, seed=2).load_state_dict(state)


def test_global_rng_untouched():
    facts = _facts()
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)
    before = (torch.random.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    s = _sampler(facts, world_size=2)
    _epoch(s)
    s.set_epoch(1)
    s.load_state_dict(s.state_dict())
    _epoch(s)
    assert torch.equal(torch.random.get_rng_state(), before[0])
    assert random.getstate() == before[1]
    assert np.array_equal(np.random.get_state()[1], before[2])


def test_bad_arguments():
    facts = _facts()
    with pytest.raises(ValueError, match="multiple of world_size"):
        _sampler(facts, world_size=3)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        _sampler(facts[:4])
    with pytest.raises(ValueError, match="rank"):
        _sampler(facts, world_size=2, rank=2)
