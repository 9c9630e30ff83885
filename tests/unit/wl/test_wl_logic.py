"""Logic-planted tasks: the formula evaluator against a loop over the definitions, formulas of
rFO^3_cnt are invariant under rawl_2 (the easy half of Theorem 5.2), the erFO extension is not,
and the graph generators' promises (regular graphs: one rwl_1^+ colour)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cmpnn_dist.wl import KG, run_test
from cmpnn_dist.wl.logic import (
    FORMULAS,
    And,
    Count,
    Eq,
    Formula,
    Not,
    components_kg,
    random_formula,
    regular_kg,
)


def holds(phi: Formula, facts: set, n: int, x: int, y: int) -> bool:
    """G |= phi(x, y), straight from the definition (quantifier = loop over z)."""
    if isinstance(phi, Eq):
        return x == y
    if isinstance(phi, Not):
        return not holds(phi.phi, facts, n, x, y)
    if isinstance(phi, And):
        return holds(phi.phi, facts, n, x, y) and holds(phi.psi, facts, n, x, y)
    assert isinstance(phi, Count)
    witnesses = sum(
        holds(phi.phi, facts, n, x, z) and (((z, phi.relation, y) in facts) != phi.negated)
        for z in range(n)
    )
    return witnesses >= phi.n


def random_kg(rng: np.random.Generator, n: int, num_rel: int, m: int) -> KG:
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, num_rel, m), rng.integers(0, n, m)])
    return KG.from_triples(n, num_rel, facts.T)


@pytest.mark.parametrize("readout", [False, True])
def test_evaluator_matches_definition(readout: bool) -> None:
    rng = np.random.default_rng(int(readout))
    for _ in range(12):
        kg = random_kg(rng, int(rng.integers(2, 7)), 2, int(rng.integers(0, 14)))
        facts = set(map(tuple, kg.triples().tolist()))
        phi = random_formula(rng, int(rng.integers(1, 4)), 2, readout)
        got = phi.evaluate(kg)
        n = kg.num_nodes
        want = [[holds(phi, facts, n, x, y) for y in range(n)] for x in range(n)]
        assert (got == np.array(want)).all(), str(phi)
    for name, phi in FORMULAS.items():
        kg = random_kg(rng, 6, 3, 16)
        facts = set(map(tuple, kg.triples().tolist()))
        want = [[holds(phi, facts, 6, x, y) for y in range(6)] for x in range(6)]
        assert (phi.evaluate(kg) == np.array(want)).all(), name


def test_named_formulas_read_as_the_paper_writes_them() -> None:
    assert FORMULAS["compose"].text() == "E>=1 z.(E>=1 y.(x=y and r0(y,z)) and r1(z,y))"
    assert FORMULAS["count2_non_neighbours"].readout
    assert not any(FORMULAS[k].readout for k in ("compose", "count2", "compose_not_edge"))


def test_rfo_formulas_are_rawl2_invariant() -> None:
    """Equal stable rawl_2 colours => equal truth value of every rFO^3_cnt formula."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        kg = random_kg(rng, int(rng.integers(3, 9)), 2, int(rng.integers(2, 18)))
        colours = run_test(kg, "rawl2").colours.reshape(-1)
        for _ in range(10):
            phi = random_formula(rng, int(rng.integers(1, 5)), 2, readout=False)
            truth = phi.evaluate(kg).reshape(-1)
            for c in np.unique(colours):
                assert len(np.unique(truth[colours == c])) == 1, str(phi)


def test_erfo_is_not_rawl2_invariant() -> None:
    """The readout formula separates pairs that rawl_2 (hence a C-MPNN without readout) cannot:
    a far tail y sees nothing of the head x, but the label depends on x's out-degree."""
    kg = components_kg(6, 6, [5, 5, 2], seed=0)
    colours = run_test(kg, "rawl2+").colours.reshape(-1)
    truth = FORMULAS["count2_non_neighbours"].evaluate(kg).reshape(-1)
    mixed = [c for c in np.unique(colours) if len(np.unique(truth[colours == c])) > 1]
    assert mixed


def test_regular_graph_has_one_rwl1_colour() -> None:
    kg = regular_kg(30, [3, 2, 1], seed=4)
    for r, d in enumerate([3, 2, 1]):
        keep = kg.rel == r
        assert (np.bincount(kg.src[keep], minlength=30) == d).all()
        assert (np.bincount(kg.dst[keep], minlength=30) == d).all()
    assert not (kg.src == kg.dst).any()
    for test in ("rwl1", "rwl1+"):
        assert run_test(kg, test).num_colours[-1] == 1
    # while rawl_2 separates pairs, e.g. (u, u) from its r0-successors
    assert run_test(kg, "rawl2", 1).num_colours[-1] > 2
    # composition labels are not constant: an R-MPNN (one node colour) cannot fit them
    labels = FORMULAS["compose"].evaluate(kg)
    assert 0 < labels.mean() < 1


@pytest.mark.parametrize("n, degrees", list(itertools.product([5, 9], [[1], [2, 1]])))
def test_regular_kg_deterministic(n: int, degrees: list[int]) -> None:
    a, b = regular_kg(n, degrees, 3), regular_kg(n, degrees, 3)
    assert (a.triples() == b.triples()).all() and a.num_edges == n * sum(degrees)
