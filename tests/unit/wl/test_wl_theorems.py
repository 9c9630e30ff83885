"""The paper's expressivity theorems as tests, with the product's C-MPNN and random weights.

Theorem 5.1 (1): if rawl_2^(t)(u, v) = rawl_2^(t)(u', v') then a C-MPNN with INIT satisfying
target node distinguishability gives h^(t)_{v|u,q} = h^(t)_{v'|u',q}, for every message,
aggregation and history function; on the graph with inverse edges (what the product trains on)
the bound is rawl_2^+.  With a global readout it holds for pairs sharing the head u (appendix
A.2), and INIT 3's per-query noise makes it a same-head statement too.  INIT 0 breaks target
node distinguishability and loses every dependence on u.  Theorem A.1: R-MPNN node states are
refined by rwl_1.  h^(t) is the output of a model built with t layers (no hook needed); the
models run in float64 and equal colours must give equal states to 1e-9.

The colours come from the brute-force tests of ``tests/helpers/wl_reference.py`` (dicts and sorted
tuples straight from the paper's update rules), not from the library's vectorised
``run_test``; every check also asserts that the model's states are not trivial (a model whose
output is constant would satisfy each bound).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import Graph, build_csr, graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.wl import KG
from cmpnn_dist.wl.rmpnn import RMPNN
from tests.helpers import wl_reference as ref

TOL = 1e-9


def run_test(
    kg: KG,
    test: str,
    rounds: int | None = None,
    *,
    eta: str = "diag",
    node_colours: np.ndarray | None = None,
) -> SimpleNamespace:
    """The brute-force reference's colouring, shaped as ``cmpnn_dist.wl.run_test``'s:
    ``.colours`` int64 [N, N] for the pair tests, [N] for rwl1 (``+``: on G^+).  ``rounds``
    None: N^2 rounds, past the stable colouring (each unstable round splits a class of the
    at most N^2 pairs)."""
    n, num_rel, facts = kg.num_nodes, kg.num_relations, kg.triples().tolist()
    rounds = n * n if rounds is None else rounds
    if test.endswith("+"):
        facts = ref.augment(num_rel, facts)
    if test.rstrip("+") == "rwl1":
        col = ref.rwl1(n, facts, rounds, node_colours)
        return SimpleNamespace(colours=np.array([col[v] for v in range(n)], dtype=np.int64))
    col = {"rawl2": ref.rawl2, "rwl2": ref.rwl2}[test.rstrip("+")](n, facts, rounds, eta)
    out = np.empty((n, n), dtype=np.int64)
    for (u, v), c in col.items():
        out[u, v] = c
    return SimpleNamespace(colours=out)


def distinct(states: np.ndarray) -> int:
    """Number of different state vectors (to 6 decimals) among the rows of states [..., d]."""
    return len(np.unique(states.round(6).reshape(-1, states.shape[-1]), axis=0))


def assert_not_trivial(states: np.ndarray, t: int, at_least: int = 3) -> None:
    """A model with t >= 1 layers must give ``at_least`` different states (a constant model,
    or one that only sees u == v, would pass every bound above)."""
    if t >= 1:
        assert distinct(states) >= at_least, (t, distinct(states))


def random_kg(seed: int, n: int = 7, num_rel: int = 2, m: int = 10) -> KG:
    rng = np.random.default_rng(seed)
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, num_rel, m), rng.integers(0, n, m)])
    return KG.from_triples(n, num_rel, facts.T)


def product_graph(kg: KG, num_rel: int) -> Graph:
    """The model's Graph holding exactly kg's edges (ids < 2|R|; no inverses added)."""
    indptr, src, rel = build_csr(kg.num_nodes, 2 * num_rel, kg.triples(), add_inverse=False)
    return Graph(
        kg.num_nodes,
        2 * num_rel,
        torch.from_numpy(indptr),
        torch.from_numpy(src),
        torch.from_numpy(rel),
    )


def pair_states(cfg: ModelConfig, graph: Graph, num_rel: int, query: int, seed: int) -> np.ndarray:
    """h^(T)_{v|u,q} for every (u, v): float64 [N (u), N (v), d]; random weights."""
    torch.manual_seed(seed)
    model = CMPNN(cfg, num_rel, OpsConfig(impl="reference")).double().eval()
    n = graph.num_nodes
    with torch.no_grad():
        heads = torch.arange(n)
        return model.node_states(graph, heads, torch.full((n,), query)).numpy()


def max_gap_within_classes(colours: np.ndarray, states: np.ndarray, same_head: bool) -> float:
    """Largest |h_P - h_Q| over pairs P, Q with one colour (and one head when ``same_head``)."""
    n = colours.shape[0]
    key = colours * n + np.arange(n)[:, None] if same_head else colours
    flat, h = key.reshape(-1), states.reshape(n * n, -1)
    _, first = np.unique(flat, return_index=True)
    rep = first[np.searchsorted(np.unique(flat), flat)]
    return float(np.abs(h - h[rep]).max())


def cross_head_classes(colours: np.ndarray) -> int:
    """Colour classes holding pairs with different heads (what makes the check non-trivial)."""
    n = colours.shape[0]
    heads = np.broadcast_to(np.arange(n)[:, None], (n, n)).reshape(-1)
    flat = colours.reshape(-1)
    return sum(len(np.unique(heads[flat == c])) > 1 for c in np.unique(flat))


GRAPHS = [(seed, plus) for seed in (0, 1) for plus in (False, True)]
AGG = ("sum", "mean", "max", "pna")


@pytest.mark.parametrize("message, aggregate", list(itertools.product((1, 2, 3), AGG)))
def test_cmpnn_is_refined_by_rawl2(message: int, aggregate: str) -> None:
    for (seed, plus), init, history in itertools.product(GRAPHS, (1, 2, 3), ("t", "0")):
        kg = random_kg(seed)
        g = kg.augmented() if plus else kg
        graph = product_graph(g, 2)
        for t in range(4):
            colours = run_test(kg, "rawl2+" if plus else "rawl2", t).colours
            cfg = ModelConfig(
                init=init,
                message=message,
                num_bases=2 if message == 3 else None,
                aggregate=aggregate,
                history=history,
                num_layers=t,
                hidden_dim=8,
            )
            states = pair_states(cfg, graph, 2, query=1, seed=t)
            gap = max_gap_within_classes(colours, states, same_head=init == 3)
            assert gap <= TOL, (seed, plus, init, history, t, gap)
            assert_not_trivial(states, t)
    assert cross_head_classes(run_test(random_kg(0), "rawl2", 3).colours) > 0


@pytest.mark.parametrize("readout, aggregate", [("sum", "sum"), ("relation", "pna")])
def test_readout_keeps_the_bound_for_one_head(readout: str, aggregate: str) -> None:
    for seed, plus in GRAPHS:
        kg = random_kg(seed)
        graph = product_graph(kg.augmented() if plus else kg, 2)
        for t in range(4):
            colours = run_test(kg, "rawl2+" if plus else "rawl2", t).colours
            cfg = ModelConfig(readout=readout, aggregate=aggregate, num_layers=t, hidden_dim=8)
            states = pair_states(cfg, graph, 2, query=0, seed=t)
            assert max_gap_within_classes(colours, states, same_head=True) <= TOL
            assert_not_trivial(states[0], t, at_least=2)  # within one head too
            assert_not_trivial(states, t)


def test_product_graph_with_its_own_inverse_edges() -> None:
    """The training graph (graph_from_triples: inverses of self-loops included) is bounded by
    rawl_2 run on that very edge list."""
    for seed in range(3):
        kg = random_kg(seed)
        graph = graph_from_triples(kg.num_nodes, 2, kg.triples())
        edges = KG.from_graph(graph)
        for t in range(4):
            colours = run_test(edges, "rawl2", t).colours
            states = pair_states(ModelConfig(num_layers=t, hidden_dim=8), graph, 2, 3, seed)
            assert max_gap_within_classes(colours, states, same_head=False) <= TOL
            assert_not_trivial(states, t)


def test_init_zero_loses_the_head() -> None:
    """INIT 0 (no target node distinguishability): h_{v|u} does not depend on u at all, it is
    bounded by rawl_2 from the constant colouring; pairs (u, v), (u', v) that rawl_2 and an
    INIT 2 model tell apart collapse."""
    kg = random_kg(3, n=8, m=14)
    graph = product_graph(kg.augmented(), 2)
    for t in range(1, 4):
        zero = pair_states(ModelConfig(init=0, num_layers=t, hidden_dim=8), graph, 2, 0, t)
        two = pair_states(ModelConfig(init=2, num_layers=t, hidden_dim=8), graph, 2, 0, t)
        assert np.abs(zero - zero[:1]).max() <= TOL  # the same for every head u
        const = run_test(kg, "rawl2+", t, eta="const").colours
        assert max_gap_within_classes(const, zero, same_head=False) <= TOL
        diag = run_test(kg, "rawl2+", t).colours
        lost = diag[:, None, :] != diag[None, :, :]  # [u, u', v]: rawl_2 separates (u,v), (u',v)
        seen = np.abs(two[:, None] - two[None, :]).max(-1) > 1e-6
        assert lost.any() and (lost & seen).any()


def test_inverse_edges_go_beyond_rawl2() -> None:
    """The graph of prop:rawl-vs-rawl+ (fixture rawl2plus_over_rawl2): r1(v, u), r2(v', u).
    rawl_2 never separates (u, v) from (u, v'), nor does a C-MPNN on G; on G^+ (the product's)
    rawl_2^+ and the C-MPNN both do, so the bound of the first half is not vacuous."""
    kg = KG.from_triples(3, 2, [[1, 0, 0], [2, 1, 0]])  # u = 0, v = 1, v' = 2
    assert run_test(kg, "rawl2").colours[0, 1] == run_test(kg, "rawl2").colours[0, 2]
    assert run_test(kg, "rawl2+", 1).colours[0, 1] != run_test(kg, "rawl2+", 1).colours[0, 2]
    for aggregate in AGG:
        cfg = ModelConfig(aggregate=aggregate, num_layers=2, hidden_dim=8)
        on_g = pair_states(cfg, product_graph(kg, 2), 2, 0, 0)
        on_plus = pair_states(cfg, product_graph(kg.augmented(), 2), 2, 0, 0)
        assert np.abs(on_g[0, 1] - on_g[0, 2]).max() <= TOL
        assert np.abs(on_plus[0, 1] - on_plus[0, 2]).max() > 1e-3


@pytest.mark.parametrize("aggregate", ["sum", "mean", "max"])
def test_rmpnn_is_refined_by_rwl1(aggregate: str) -> None:
    for seed, plus, history in itertools.product((0, 1, 2), (False, True), ("t", "0")):
        kg = random_kg(seed, n=9, m=12)
        rng = np.random.default_rng(seed)
        node_colours = rng.integers(0, 2, kg.num_nodes) if seed == 2 else None
        graph = product_graph(kg.augmented() if plus else kg, 2)
        for t in range(4):
            torch.manual_seed(t)
            model = RMPNN(4, 8, t, aggregate, history, num_colours=2).double()
            with torch.no_grad():
                c = None if node_colours is None else torch.from_numpy(node_colours)
                h = model.node_states(graph, c).numpy()
            colours = run_test(
                kg, "rwl1+" if plus else "rwl1", t, node_colours=node_colours
            ).colours
            for k in np.unique(colours):
                idx = np.flatnonzero(colours == k)
                assert np.abs(h[idx] - h[idx[0]]).max() <= TOL, (seed, plus, history, t)
            assert_not_trivial(h, t, at_least=2)


@pytest.mark.slow
@pytest.mark.parametrize("message, aggregate", list(itertools.product((1, 3), AGG)))
def test_cmpnn_bound_many_graphs(message: int, aggregate: str) -> None:
    """The same check on 20 larger random graphs, up to 5 layers, wider models, with and
    without layer norm and shortcut."""
    for seed, plus in itertools.product(range(20), (False, True)):
        kg = random_kg(1000 + seed, n=12, num_rel=3, m=24)
        graph = product_graph(kg.augmented() if plus else kg, 3)
        for t in range(6):
            colours = run_test(kg, "rawl2+" if plus else "rawl2", t).colours
            cfg = ModelConfig(
                message=message,
                aggregate=aggregate,
                num_layers=t,
                hidden_dim=16,
                layer_norm=seed % 2 == 0,  # and without layer norm / shortcut
                shortcut=seed % 4 < 2,
            )
            states = pair_states(cfg, graph, 3, query=seed % 6, seed=seed)
            assert max_gap_within_classes(colours, states, same_head=False) <= TOL
            assert_not_trivial(states, t)
