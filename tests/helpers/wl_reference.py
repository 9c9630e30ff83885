"""Brute-force relational WL tests: dicts, tuples and sorted lists, straight from the paper's
update rules (appendix A).  Slow and obvious; the oracle for :mod:`cmpnn_dist.wl.refine`."""

from __future__ import annotations

import itertools


def in_neighbours(num_nodes, facts):
    """{v: [(w, r), ...]} with w in N_r(v) (facts are (w, r, v))."""
    nb = {v: [] for v in range(num_nodes)}
    for w, r, v in set(map(tuple, facts)):
        nb[v].append((w, r))
    return nb


def augment(num_relations, facts):
    """E^+ = E plus r^-(v, u) for r(u, v) with u != v; r^- = r + |R|."""
    facts = {tuple(map(int, f)) for f in facts}
    return sorted(facts | {(v, r + num_relations, u) for u, r, v in facts if u != v})


def _relabel(signatures):
    """Map each distinct signature to a fresh integer (order of first appearance)."""
    table = {}
    return {key: table.setdefault(sig, len(table)) for key, sig in signatures.items()}


def rwl1(num_nodes, facts, rounds, colours=None):
    """rwl_1^(rounds) as {v: colour}."""
    nb = in_neighbours(num_nodes, facts)
    col = {v: (0 if colours is None else int(colours[v])) for v in range(num_nodes)}
    for _ in range(rounds):
        col = _relabel({v: (col[v], tuple(sorted((col[w], r) for w, r in nb[v]))) for v in col})
    return col


def eta(num_nodes, kind="diag"):
    return {
        (u, v): int(u == v) if kind == "diag" else 0
        for u, v in itertools.product(range(num_nodes), repeat=2)
    }


def rawl2(num_nodes, facts, rounds, init="diag"):
    """rawl_2^(rounds) as {(u, v): colour}."""
    nb = in_neighbours(num_nodes, facts)
    col = eta(num_nodes, init)
    for _ in range(rounds):
        col = _relabel(
            {(u, v): (col[u, v], tuple(sorted((col[u, w], r) for w, r in nb[v]))) for u, v in col}
        )
    return col


def rwl2(num_nodes, facts, rounds, init="diag"):
    """rwl_2^(rounds) as {(u, v): colour}."""
    nb = in_neighbours(num_nodes, facts)
    col = eta(num_nodes, init)
    for _ in range(rounds):
        col = _relabel(
            {
                (u, v): (
                    col[u, v],
                    tuple(sorted((col[w, v], r) for w, r in nb[u])),
                    tuple(sorted((col[u, w], r) for w, r in nb[v])),
                )
                for u, v in col
            }
        )
    return col


def run(test, num_nodes, num_relations, facts, rounds, init="diag"):
    """Any of the six tests by name; ``+`` runs on the augmented graph."""
    if test.endswith("+"):
        facts = augment(num_relations, facts)
    base = test.rstrip("+")
    if base == "rwl1":
        return rwl1(num_nodes, facts, rounds)
    return {"rawl2": rawl2, "rwl2": rwl2}[base](num_nodes, facts, rounds, init)


def same_partition(a: dict, b) -> bool:
    """Whether colouring dict ``a`` and array/dict ``b`` (indexed by the same keys) induce the
    same partition: a bijection between their colour values."""
    fwd, bwd = {}, {}
    for key, ca in a.items():
        cb = int(b[key])
        if fwd.setdefault(ca, cb) != cb or bwd.setdefault(cb, ca) != ca:
            return False
    return True
