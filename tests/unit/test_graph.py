"""Graph.query_edge_mask: every removal mode against a brute-force scan of the edge list; the
derived structures (out-edge index, relation pairs, ...) against loops over the edge list, and
their invalidation (Graph.invalidate, PerGraph)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cmpnn_dist.graph import Graph, PerGraph, graph_from_triples
from tests.helpers.host_sync import host_syncs

NUM_NODES, NUM_REL = 12, 3


def dense_facts(seed: int = 0) -> np.ndarray:
    """Random facts with many parallel edges (several relations between one pair)."""
    rng = np.random.default_rng(seed)
    heads, tails = rng.integers(0, NUM_NODES, (2, 80))
    facts = np.stack([heads, rng.integers(0, NUM_REL, 80), tails], axis=1)
    return np.unique(facts, axis=0)


def removed_edges(graph, mask) -> set[tuple[int, int, int]]:
    dst = graph.dst()
    return {(int(graph.src[e]), int(graph.rel[e]), int(dst[e])) for e in torch.nonzero(~mask)}


def all_edges(graph) -> list[tuple[int, int, int]]:
    dst = graph.dst()
    return [(int(s), int(r), int(d)) for s, r, d in zip(graph.src, graph.rel, dst, strict=True)]


def test_one_hop_removes_every_edge_between_the_pair():
    facts = dense_facts()
    graph = graph_from_triples(NUM_NODES, NUM_REL, facts)
    batch = torch.from_numpy(facts[[0, 7, 20]])
    mask = graph.query_edge_mask(batch, "one_hop")
    pairs = {frozenset((h, t)) for h, _, t in batch.tolist()}
    expect = {(s, r, d) for s, r, d in all_edges(graph) if frozenset((s, d)) in pairs}
    assert removed_edges(graph, mask) == expect
    # parallel edges exist, so one_hop removes strictly more than the query facts
    assert len(expect) > 2 * len(batch)


def test_candidates_removes_edges_between_head_and_every_candidate():
    facts = dense_facts(1)
    graph = graph_from_triples(NUM_NODES, NUM_REL, facts)
    batch = torch.from_numpy(facts[[1, 4]])
    negatives = torch.tensor([[2, 5, 9], [0, 3, 11]])
    mask = graph.query_edge_mask(batch, "candidates", negatives=negatives)
    pairs = set()
    for (h, _, t), negs in zip(batch.tolist(), negatives.tolist(), strict=True):
        pairs |= {frozenset((h, c)) for c in [t, *negs]}
    expect = {(s, r, d) for s, r, d in all_edges(graph) if frozenset((s, d)) in pairs}
    assert removed_edges(graph, mask) == expect
    one_hop = removed_edges(graph, graph.query_edge_mask(batch, "one_hop"))
    assert one_hop < expect  # the negatives' links to the head are removed too


def test_candidates_without_negatives_and_unknown_mode_are_errors():
    graph = graph_from_triples(NUM_NODES, NUM_REL, dense_facts())
    batch = torch.from_numpy(dense_facts()[:2])
    with pytest.raises(ValueError, match="needs negatives"):
        graph.query_edge_mask(batch, "candidates")
    with pytest.raises(ValueError, match="unknown query-edge removal mode 'all'"):
        graph.query_edge_mask(batch, "all")


def test_query_removes_the_fact_and_its_inverse_given_either_direction():
    """Facts given forward or with the inverse relation id remove the same two edges; facts
    stored twice (parallel copies) lose every copy."""
    facts = dense_facts(2)
    facts = np.concatenate([facts, facts[:3]])  # three facts stored twice
    graph = graph_from_triples(NUM_NODES, NUM_REL, facts)
    fwd = torch.from_numpy(facts[[0, 1, 9]])
    inv = torch.stack([fwd[:, 2], fwd[:, 1] + NUM_REL, fwd[:, 0]], dim=1)
    expect = set()
    for h, r, t in fwd.tolist():
        expect |= {(h, r, t), (t, r + NUM_REL, h)}
    for batch in (fwd, inv):
        mask = graph.query_edge_mask(batch, "query")
        assert mask.shape == (graph.num_edges,) and mask.dtype == torch.bool
        assert removed_edges(graph, mask) == expect
        # facts 0 and 1 are stored twice: two copies each way; fact 9 once each way
        assert int((~mask).sum()) == 4 + 4 + 2
    # a fact that is not in the graph removes nothing
    edges = set(all_edges(graph))
    absent = next((h, 0, t) for h in range(NUM_NODES) for t in range(NUM_NODES)
                  if (h, 0, t) not in edges and (t, NUM_REL, h) not in edges)  # fmt: skip
    assert bool(graph.query_edge_mask(torch.tensor([absent]), "query").all())


@pytest.mark.parametrize("mode", ["query", "one_hop", "candidates"])
def test_mask_is_built_without_host_syncs(mode: str):
    """Once the sorted keys are cached, building a mask reads nothing back from the device
    (on CUDA the training step's host then never waits for the GPU before the forward)."""
    graph = graph_from_triples(NUM_NODES, NUM_REL, dense_facts(3))
    batch = torch.from_numpy(dense_facts(3)[[0, 5]])
    negatives = torch.tensor([[1, 2], [3, 4]])
    graph.query_edge_mask(batch, mode, negatives=negatives)  # builds the cached keys
    assert host_syncs(lambda: graph.query_edge_mask(batch, mode, negatives=negatives)) == []


def test_mask_of_a_graph_without_edges():
    graph = Graph(3, 2, torch.zeros(4, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                  torch.zeros(0, dtype=torch.long))  # fmt: skip
    assert graph.query_edge_mask(torch.tensor([[0, 0, 1]]), "query").shape == (0,)


def test_derived_structures_against_loops_over_the_edges():
    g = graph_from_triples(NUM_NODES, NUM_REL, dense_facts(3))
    edges = all_edges(g)
    ptr, edge, dst, rel = g.out_index()
    for v in range(NUM_NODES):  # each source's edge ids in edge-id order
        ids = [e for e, (s, _, _) in enumerate(edges) if s == v]
        assert edge[ptr[v] : ptr[v + 1]].tolist() == ids
    assert dst.tolist() == [edges[e][2] for e in edge] and rel.tolist() == [
        edges[e][1] for e in edge
    ]
    assert all(int(edge[p]) == e for e, p in enumerate(g.out_position().tolist()))
    pairs = sorted({(d, r) for _, r, d in edges})
    node, prel, edge_pair, counts = g.relation_pairs()
    assert list(zip(node.tolist(), prel.tolist(), strict=True)) == pairs
    assert [pairs[p] for p in edge_pair.tolist()] == [(d, r) for _, r, d in edges]
    assert counts.tolist() == [sum((d, r) == pair for _, r, d in edges) for pair in pairs]
    assert g.max_in_degree() == max(sum(d == v for *_, d in edges) for v in range(NUM_NODES))
    assert g.indptr_numpy().tolist() == g.indptr.tolist()
    assert g.out_index() is g.out_index()  # built once


def test_invalidate_drops_what_was_derived_here_and_in_per_graph_caches():
    g = graph_from_triples(NUM_NODES, NUM_REL, dense_facts(4))
    cache: PerGraph[int, list] = PerGraph()
    built = []
    value = cache.get(g, 1, lambda: built.append(1) or ["one"])
    assert cache.get(g, 1, lambda: built.append(1) or ["again"]) is value and built == [1]
    assert cache.get(g, 2, lambda: ["two"]) == ["two"]  # another key
    before = g.relation_pairs()
    g.rel.copy_((g.rel + 1) % g.num_relations)  # changed in place, then declared
    g.invalidate()
    assert cache.get(g, 1, lambda: ["rebuilt"]) == ["rebuilt"]
    after = g.relation_pairs()
    assert after is not before
    assert sorted(zip(after.node.tolist(), after.rel.tolist(), strict=True)) == sorted(
        {(d, r) for _, r, d in all_edges(g)}
    )
    other = Graph(g.num_nodes, g.num_relations, g.indptr, g.src, g.rel)  # no shared entries
    assert cache.get(other, 1, lambda: ["other"]) == ["other"]
    del other
    import gc

    gc.collect()
    assert len(cache) == 1  # a graph that is gone leaves nothing behind
