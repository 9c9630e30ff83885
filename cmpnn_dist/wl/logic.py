"""Logic-planted link tasks: pairs labelled by a formula of rFO^3_cnt or erFO^3_cnt (section 5.2,
appendix A.3).

rFO^3_cnt over relations R and pair colours C (here eta(u, v) = [u = v]: the atom ``Eq``)::

    phi ::= a(x, y)  |  not phi  |  phi and psi  |  E>=N z (phi(x, z) and r(z, y))

erFO^3_cnt adds ``E>=N z (phi(x, z) and not r(z, y))``: a count over *non*-neighbours, which
C-MPNNs capture with a global readout (Theorem 5.3) but not without (Theorem 5.2).

A formula evaluates to a boolean matrix ``M [N, N]`` with ``M[u, v] = G |= phi(u, v)``::

    Eq            -> I
    Not(phi)      -> ~M_phi
    And(phi, psi) -> M_phi & M_psi
    Count(N, r, phi)         -> (M_phi @ A_r) >= N          A_r[z, y] = [r(z, y) in E]
    CountNot(N, r, phi)      -> (M_phi @ (1 - A_r)) >= N

Random graphs: :func:`regular_kg` (each relation a union of random permutations, so every node
has the same in- and out-degree per relation and rwl_1 gives all nodes one colour) and
:func:`components_kg` (many small random components: most pairs are far apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cmpnn_dist.wl.graph import KG


class Formula:
    """A binary formula phi(x, y); ``evaluate(kg)`` -> bool [N, N]."""

    readout = False  # whether it uses erFO's negated modality

    def evaluate(self, kg: KG) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def text(self, x: str = "x", y: str = "y") -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text()


@dataclass(frozen=True)
class Eq(Formula):
    """The pair colour a(x, y) with a = "same node": x = y."""

    def evaluate(self, kg: KG) -> np.ndarray:
        return np.eye(kg.num_nodes, dtype=bool)

    def text(self, x: str = "x", y: str = "y") -> str:
        return f"{x}={y}"


@dataclass(frozen=True)
class Not(Formula):
    phi: Formula

    @property
    def readout(self) -> bool:  # type: ignore[override]
        return self.phi.readout

    def evaluate(self, kg: KG) -> np.ndarray:
        return ~self.phi.evaluate(kg)

    def text(self, x: str = "x", y: str = "y") -> str:
        return f"not {self.phi.text(x, y)}"


@dataclass(frozen=True)
class And(Formula):
    phi: Formula
    psi: Formula

    @property
    def readout(self) -> bool:  # type: ignore[override]
        return self.phi.readout or self.psi.readout

    def evaluate(self, kg: KG) -> np.ndarray:
        return self.phi.evaluate(kg) & self.psi.evaluate(kg)

    def text(self, x: str = "x", y: str = "y") -> str:
        return f"({self.phi.text(x, y)} and {self.psi.text(x, y)})"


def adjacency(kg: KG, relation: int) -> np.ndarray:
    """A_r as int64 [N, N]: ``A[z, y] = 1`` iff ``r(z, y)`` is a fact."""
    a = np.zeros((kg.num_nodes, kg.num_nodes), dtype=np.int64)
    keep = kg.rel == relation
    a[kg.src[keep], kg.dst[keep]] = 1
    return a


@dataclass(frozen=True)
class Count(Formula):
    """E>=n z (phi(x, z) and r(z, y)); with ``negated``: ... and not r(z, y) (erFO)."""

    n: int
    relation: int
    phi: Formula
    negated: bool = False

    @property
    def readout(self) -> bool:  # type: ignore[override]
        return self.negated or self.phi.readout

    def evaluate(self, kg: KG) -> np.ndarray:
        a = adjacency(kg, self.relation)
        if self.negated:
            a = 1 - a
        return self.phi.evaluate(kg).astype(np.int64) @ a >= self.n

    def text(self, x: str = "x", y: str = "y") -> str:
        z = next(v for v in "xyz" if v not in (x, y))  # three variables suffice (rFO^3)
        lit = f"{'not ' if self.negated else ''}r{self.relation}({z},{y})"
        return f"E>={self.n} {z}.({self.phi.text(x, z)} and {lit})"


def edge(relation: int) -> Formula:
    """r(x, y) as an rFO formula: E>=1 z (x = z and r(z, y))."""
    return Count(1, relation, Eq())


# The planted tasks of benchmarks/wl/wl_logic.py
FORMULAS: dict[str, Formula] = {
    # composition: E z (r0(x, z) and r1(z, y))
    "compose": Count(1, 1, edge(0)),
    # counting: at least 2 witnesses z with r0(x, z) and r1(z, y)
    "count2": Count(2, 1, edge(0)),
    # negation and conjunction: a composition that is not a direct r2 link
    "compose_not_edge": And(Count(1, 1, edge(0)), Not(edge(2))),
    # erFO (readout): at least 2 r0-successors z of x with no r1 edge z -> y
    "count2_non_neighbours": Count(2, 1, edge(0), negated=True),
}


def random_formula(
    rng: np.random.Generator, depth: int, num_relations: int, readout: bool = False
) -> Formula:
    """A random formula of nesting ``depth`` (counting thresholds 1..2; negated modalities only
    when ``readout``)."""
    if depth == 0:
        return Eq()
    kind = rng.integers(0, 4)
    if kind == 0:
        return Not(random_formula(rng, depth - 1, num_relations, readout))
    if kind == 1:
        return And(
            random_formula(rng, depth - 1, num_relations, readout),
            random_formula(rng, depth - 1, num_relations, readout),
        )
    return Count(
        int(rng.integers(1, 3)),
        int(rng.integers(0, num_relations)),
        random_formula(rng, depth - 1, num_relations, readout),
        negated=bool(readout and rng.integers(0, 2)),
    )


def regular_kg(num_nodes: int, degrees: list[int], seed: int) -> KG:
    """Relation r is the union of ``degrees[r]`` random permutations without fixed points that
    share no pair (redrawn until so): every node has in- and out-degree exactly ``degrees[r]``
    in r, no self-loops, so rwl_1 and rwl_1^+ give every node the same colour."""
    rng = np.random.default_rng(seed)
    nodes = np.arange(num_nodes)
    facts = []
    for r, d in enumerate(degrees):
        used: set[tuple[int, int]] = set()
        for _ in range(d):
            for _attempt in range(10_000):
                perm = rng.permutation(num_nodes)
                pairs = set(zip(nodes.tolist(), perm.tolist(), strict=True))
                if not (perm == nodes).any() and not pairs & used:
                    break
            else:
                raise ValueError(f"no {d}-regular relation on {num_nodes} nodes found")
            used |= pairs
            facts.append(np.stack([nodes, np.full(num_nodes, r), perm], 1))
    return KG.from_triples(num_nodes, len(degrees), np.concatenate(facts))


def components_kg(num_components: int, size: int, edges_per_relation: list[int], seed: int) -> KG:
    """``num_components`` disjoint random graphs of ``size`` nodes, ``edges_per_relation[r]``
    random r-facts in each."""
    rng = np.random.default_rng(seed)
    facts = []
    for c in range(num_components):
        base = c * size
        for r, m in enumerate(edges_per_relation):
            h = rng.integers(0, size, m) + base
            t = rng.integers(0, size, m) + base
            facts.append(np.stack([h, np.full(m, r), t], 1))
    return KG.from_triples(num_components * size, len(edges_per_relation), np.concatenate(facts))
