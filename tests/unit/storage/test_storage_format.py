"""Graph store: write -> memory-mapped read round trips, CSR invariants, sharding, zero copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cmpnn_dist.graph import build_csr
from cmpnn_dist.storage import GraphSpec, StorageError, open_dataset, write_dataset
from cmpnn_dist.storage.csr import fast_csr
from cmpnn_dist.storage.format import shard_boundaries
from tests.helpers.fixtures_storage import random_facts, reference_csr


def _write(tmp_path, facts, n, r, shards=3, types=None, name="ds", **kw):
    graph = GraphSpec(
        n,
        [f"e{i}" for i in range(n)],
        types,
        {"train": facts, "valid": facts[:4], "test": facts[4:9]},
    )
    return write_dataset(
        tmp_path / name,
        name=name,
        relation_names=[f"r{i}" for i in range(r)],
        graphs={"train": graph},
        inductive=False,
        node_type_names=["A", "B"] if types is not None else [],
        num_shards=shards,
        **kw,
    )


@pytest.mark.parametrize("seed,n,r,f", [(0, 40, 3, 150), (1, 7, 1, 30), (2, 300, 9, 2000)])
def test_fast_csr_equals_reference(seed, n, r, f):
    facts = random_facts(np.random.default_rng(seed), n, r, f)
    got = fast_csr(n, r, facts)
    ref = reference_csr(n, r, facts)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got, build_csr(n, r, facts), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(
        fast_csr(n, r, facts, add_inverse=False), build_csr(n, r, facts, False), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_fast_csr_overflow_fallback(monkeypatch):
    import cmpnn_dist.storage.csr as csr

    facts = random_facts(np.random.default_rng(5), 30, 2, 100)
    monkeypatch.setattr(csr, "_INT64_MAX", 10)  # force the "key needs > 63 bits" branch
    for a, b in zip(csr.fast_csr(30, 2, facts), reference_csr(30, 2, facts), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shards", [1, 2, 3, 8])
def test_roundtrip_equals_numpy(tmp_path, shards):
    rng = np.random.default_rng(shards)
    n, r = 60, 4
    facts = random_facts(rng, n, r, 400)
    types = rng.integers(0, 2, n)
    ds = open_dataset(_write(tmp_path, facts, n, r, shards=shards, types=types), verify=True)
    g = ds.graph_data("train")
    assert (ds.name, ds.inductive, ds.num_relations) == ("ds", False, r)
    assert ds.relation_names == [f"r{i}" for i in range(r)] and ds.graph_names == ["train"]
    assert g.num_nodes == n and g.entity_names == [f"e{i}" for i in range(n)]
    np.testing.assert_array_equal(g.node_types.numpy(), types)
    assert g.node_type_names == ["A", "B"]
    np.testing.assert_array_equal(g.facts("train").numpy(), facts)
    np.testing.assert_array_equal(g.facts("valid").numpy(), facts[:4])
    np.testing.assert_array_equal(g.facts("test").numpy(), facts[4:9])
    indptr, src, rel = reference_csr(n, r, facts)
    graph = g.graph()
    assert graph.num_nodes == n and graph.num_relations == 2 * r
    np.testing.assert_array_equal(graph.indptr.numpy(), indptr)
    np.testing.assert_array_equal(graph.src.numpy(), src)
    np.testing.assert_array_equal(graph.rel.numpy(), rel)
    # shards tile the node range and each equals the slice of the reference CSR
    parts = g.shards()
    assert len(parts) == shards
    assert parts[0].node_start == 0 and parts[-1].node_end == n
    for a, b in zip(parts, parts[1:], strict=False):
        assert a.node_end == b.node_start
    for s in parts:
        lo, hi = indptr[s.node_start], indptr[s.node_end]
        np.testing.assert_array_equal(s.indptr.numpy(), indptr[s.node_start : s.node_end + 1] - lo)
        np.testing.assert_array_equal(s.src.numpy(), src[lo:hi])
        np.testing.assert_array_equal(s.rel.numpy(), rel[lo:hi])


def test_inverse_edges_and_row_order(tmp_path):
    facts = np.array([[0, 0, 1], [2, 1, 1], [1, 0, 2], [0, 1, 1]])
    g = open_dataset(_write(tmp_path, facts, 3, 2, shards=1)).graph_data().graph()
    rows = {
        v: list(
            zip(
                g.src[g.indptr[v] : g.indptr[v + 1]].tolist(),
                g.rel[g.indptr[v] : g.indptr[v + 1]].tolist(),
                strict=True,
            )
        )
        for v in range(3)
    }
    # hand-computed: node 1 receives 0-r0->1, 0-r1->1, 2-r1->1 and the inverse of (1,r0,2)
    assert rows[1] == [(0, 0), (0, 1), (2, 1), (2, 2)]
    assert rows[0] == [(1, 2), (1, 3)]  # inverses of (0,0,1) and (0,1,1): rel + |R|
    assert rows[2] == [(1, 0), (1, 3)]
    assert g.num_edges == 2 * len(facts)


def test_shard_balance():
    rng = np.random.default_rng(0)
    deg = rng.zipf(2.0, size=5000).clip(max=400)
    indptr = np.concatenate([[0], np.cumsum(deg)])
    for s in (1, 2, 4, 7, 16):
        b = shard_boundaries(indptr, s)
        assert b[0] == 0 and b[-1] == 5000 and np.all(np.diff(b) >= 1) and len(b) == s + 1
        edges = np.diff(indptr[b])
        assert edges.max() <= indptr[-1] / s + deg.max()
    assert len(shard_boundaries(np.array([0, 1, 2]), 5)) == 3  # at most N shards
    b = shard_boundaries(np.array([0, 0, 0, 9, 9]), 2)  # all edges on one node
    assert list(b) == [0, 3, 4] or list(b) == [0, 2, 4]


def test_zero_copy_views_of_the_mapped_file(tmp_path):
    facts = random_facts(np.random.default_rng(3), 50, 2, 300)
    path = _write(tmp_path, facts, 50, 2, shards=2)
    g = open_dataset(path).graph_data()
    shards = g.shards()  # maps the files
    ranges = {}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith(str(path)):
                a, b = parts[0].split("-")
                ranges.setdefault(parts[5], []).append((int(a, 16), int(b, 16)))
    for s in shards:
        spans = ranges[str(s.path)]
        for t in (s.indptr, s.src, s.rel):
            assert any(a <= t.data_ptr() and t.data_ptr() + 8 * t.numel() <= b for a, b in spans), (
                f"{s.path}: tensor is not a view of the mapping"
            )
    # one shard: graph() hands out the views themselves
    g1 = open_dataset(_write(tmp_path, facts, 50, 2, shards=1, name="one")).graph_data()
    assert g1.graph().src.data_ptr() == g1.shards()[0].src.data_ptr()


def test_open_shard_range(tmp_path):
    facts = random_facts(np.random.default_rng(4), 80, 3, 500)
    path = _write(tmp_path, facts, 80, 3, shards=4)
    full = open_dataset(path).graph_data().shards()
    part = open_dataset(path, shards=range(1, 3)).graph_data()
    got = part.shards()
    assert [s.node_start for s in got] == [full[1].node_start, full[2].node_start]
    assert torch.equal(got[1].src, full[2].src)
    with pytest.raises(StorageError, match="needs all shards"):
        part.graph()
    with pytest.raises(StorageError, match="asked for shard 9"):
        open_dataset(path, shards=[9]).graph_data()


def test_empty_splits_and_negatives(tmp_path):
    facts = np.array([[0, 0, 1], [1, 0, 2]])
    g = GraphSpec(3, ["a", "b", "c"], None, {"train": facts})
    neg = {
        "test": {
            "head_neg": np.array([[0, 1, 2], [2, 1, 0]]),
            "tail_neg": np.array([[1, 1, 1], [0, 0, 0]]),
        }
    }
    path = write_dataset(
        tmp_path / "d",
        name="d",
        relation_names=["r"],
        graphs={"train": g},
        inductive=False,
        negatives=neg,
        num_shards=2,
    )
    ds = open_dataset(path, verify=True)
    assert ds.graph_data().facts("valid").shape == (0, 3)
    assert ds.graph_data().node_types is None
    assert ds.negatives("valid") is None
    np.testing.assert_array_equal(ds.negatives("test")["head_neg"].numpy(), neg["test"]["head_neg"])
    np.testing.assert_array_equal(ds.negatives("test")["tail_neg"].numpy(), neg["test"]["tail_neg"])


def test_inductive_two_graphs(tmp_path):
    a = GraphSpec(
        3, ["a", "b", "c"], None, {"train": np.array([[0, 0, 1]]), "valid": np.array([[1, 0, 2]])}
    )
    b = GraphSpec(
        2, ["x", "y"], None, {"train": np.array([[1, 0, 0]]), "test": np.array([[0, 0, 1]])}
    )
    ds = open_dataset(
        write_dataset(
            tmp_path / "i",
            name="i",
            relation_names=["r"],
            graphs={"train": a, "test": b},
            inductive=True,
        )
    )
    assert ds.inductive and ds.graph_names == ["train", "test"]
    assert ds.graph_data("test").num_nodes == 2
    assert ds.graph_data("test").facts("test").tolist() == [[0, 0, 1]]
    assert ds.graph_data("test").graph().num_edges == 2
    with pytest.raises(KeyError):
        ds.graph_data("other")


@pytest.mark.parametrize("force_fallback", [False, True])
def test_duplicate_edge_count(monkeypatch, force_fallback):
    import cmpnn_dist.storage.csr as csr

    if force_fallback:
        monkeypatch.setattr(csr, "_INT64_MAX", 10)
    facts = np.array([[0, 0, 1], [1, 1, 2], [0, 0, 1], [2, 0, 0], [0, 0, 1]])
    *_, dups = csr.csr_and_duplicates(3, 2, facts)
    assert dups == 4  # the fact (0,0,1) twice more: 2 forward + 2 inverse repeats
    assert csr.csr_and_duplicates(3, 2, facts[:2])[3] == 0
