"""Typed negatives: never cross the relation's tail types, never a true tail, exact resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cmpnn_dist.training.sampler import QuerySampler

N, R, T = 40, 4, 3
TYPES = np.arange(N) % T  # node v has type v % 3
# relation r links type SIG[r][0] heads to SIG[r][1] tails; relation 3 has two tail types
SIG = [(0, 1), (1, 2), (2, 0), (0, None)]


def _typed_facts(count: int = 150, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        r = int(rng.integers(0, R))
        ht, tt = SIG[r]
        tt = int(rng.integers(1, 3)) if tt is None else tt
        h = int(rng.choice(np.flatnonzero(TYPES == ht)))
        t = int(rng.choice(np.flatnonzero(TYPES == tt)))
        rows.append((h, r, t))
    return torch.unique(torch.tensor(rows), dim=0)


def _allowed_types(facts: torch.Tensor) -> dict[int, set[int]]:
    """Brute force: tail types of each relation (inverse: head types) in the facts."""
    out: dict[int, set[int]] = {}
    for h, r, t in facts.tolist():
        out.setdefault(r, set()).add(int(TYPES[t]))
        out.setdefault(r + R, set()).add(int(TYPES[h]))
    return out


def _sampler(facts, **kw) -> QuerySampler:
    kw.setdefault("node_types", torch.from_numpy(TYPES))
    return QuerySampler(facts, N, R, 8, 6, 5, **kw)


def test_typed_negatives_never_cross_types_nor_hit_a_true_tail():
    facts = _typed_facts()
    extra = _typed_facts(40, seed=1)  # more known facts the negatives must avoid
    known = {tuple(f) for f in torch.cat([facts, extra]).tolist()}
    allowed = _allowed_types(facts)
    s = _sampler(facts, filter_triples=extra)
    assert s.negatives == "typed"
    seen_types: dict[int, set[int]] = {}
    for epoch in range(3):
        s.set_epoch(epoch)
        for batch in s:
            for (h, r, _), negs in zip(
                batch.queries.tolist(), batch.negatives.tolist(), strict=True
            ):
                for v in negs:
                    assert int(TYPES[v]) in allowed[r], (h, r, v)
                    fact = (h, r, v) if r < R else (v, r - R, h)
                    assert fact not in known, (h, r, v)
                    seen_types.setdefault(r, set()).add(int(TYPES[v]))
    # relation 3 has tails of types 1 and 2: both are drawn, type 0 never
    assert seen_types[3] == {1, 2}
    assert seen_types[3 + R] == {0}


def test_tail_type_table_is_the_training_tails():
    facts = _typed_facts()
    s = _sampler(facts)
    allowed = _allowed_types(facts)
    for r in range(2 * R):
        assert set(np.flatnonzero(s.relation_tail_types[r]).tolist()) == allowed[r]
        assert set(TYPES[s.candidates(r)].tolist()) == allowed[r]
        assert len(s.candidates(r)) == int(np.isin(TYPES, list(allowed[r])).sum())


def test_dense_query_falls_back_to_the_typed_complement():
    # (0, r0, v) true for every type-1 node but one: only node 31 is a strict typed negative
    type1 = np.flatnonzero(TYPES == 1)
    facts = torch.tensor([[0, 0, int(v)] for v in type1 if v != 31] + [[3, 1, 5], [6, 2, 9]])
    s = QuerySampler(facts, N, R, 2, 8, 0, node_types=torch.from_numpy(TYPES))
    for epoch in range(4):
        s.set_epoch(epoch)
        for batch in s:
            for (h, r, _), negs in zip(
                batch.queries.tolist(), batch.negatives.tolist(), strict=True
            ):
                if (h, r) == (0, 0):
                    assert set(negs) == {31}


def test_without_types_typed_is_uniform_and_uniform_ignores_types():
    facts = _typed_facts()
    a = QuerySampler(facts, N, R, 8, 6, 5)  # default negatives="typed", no node types
    b = QuerySampler(facts, N, R, 8, 6, 5, negatives="uniform")
    c = _sampler(facts, negatives="uniform")
    assert a.negatives == b.negatives == c.negatives == "uniform"
    for x, y, z in zip(a, b, c, strict=True):
        assert torch.equal(x.negatives, y.negatives) and torch.equal(x.negatives, z.negatives)
    with pytest.raises(ValueError, match="train.negatives"):
        QuerySampler(facts, N, R, 8, 6, 5, negatives="by_type")


def test_typed_state_round_trip_continues_exactly():
    facts = _typed_facts()
    ref = _sampler(facts)
    ref.set_epoch(1)
    for _ in range(3):
        ref.next_batch()
    state = ref.state_dict()
    want = [b.negatives.clone() for b in ref]
    other = _sampler(facts)
    other.load_state_dict(state)
    got = [b.negatives.clone() for b in other]
    assert len(got) == len(want) > 0
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True))
    uniform = _sampler(facts, negatives="uniform")
    with pytest.raises(ValueError, match="negatives"):
        uniform.load_state_dict(state)
    old = dict(uniform.state_dict())
    del old["negatives"]  # a state written before typed negatives existed
    _sampler(facts, negatives="uniform").load_state_dict(old)
