"""Synthetic generators: rule-planted KG, TRI-SQR, biokg-scale graph."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.convert.synthetic import trisqr_graphs
from cmpnn_dist.convert.synthetic.biokg_scale import TYPE_SIZES, generate, write_tsv
from cmpnn_dist.convert.synthetic.rule_kg import BASE, TARGETS, generate_graph
from cmpnn_dist.convert.synthetic.rule_kg import DEFAULTS as RULE_DEFAULTS
from cmpnn_dist.storage import StorageError, open_dataset


def _brute_force_targets(base: np.ndarray) -> dict[str, set[tuple[int, int]]]:
    """Obvious rule evaluation: count witnesses z per (x, y) with Python dicts."""
    out_edges = defaultdict(lambda: defaultdict(set))
    for h, r, t in base.tolist():
        out_edges[BASE[r][0]][h].add(t)
    result = {}
    for name, r1, r2, k in TARGETS:
        count = defaultdict(int)
        for x, zs in out_edges[r1].items():
            for z in zs:
                for y in out_edges[r2].get(z, ()):
                    count[(x, y)] += 1
        result[name] = {p for p, c in count.items() if c >= k and p[0] != p[1]}
    return result


def test_rule_kg_targets_follow_the_rules():
    p = dict(RULE_DEFAULTS, num_entities=300)
    types, base, targets = generate_graph(p, seed=3)
    expected = _brute_force_targets(base)
    for k, (name, *_rest) in enumerate(TARGETS):
        got = {(h, t) for h, r, t in targets[name].tolist()}
        assert got == expected[name], name
        assert set(targets[name][:, 1].tolist()) <= {len(BASE) + k}
        assert len(got) > 10  # every rule fires
    # typed: every base fact respects its relation's signature
    for h, r, t in base.tolist():
        assert (types[h], types[t]) == (BASE[r][1], BASE[r][2])


def test_rule_kg_dataset(tmp_path):
    path = build_dataset("synthetic:rule_kg", tmp_path / "kg", num_shards=2)
    ds = open_dataset(path, verify=True)
    g = ds.graph_data()
    assert ds.name == "rule_kg" and ds.num_relations == len(BASE) + len(TARGETS)
    assert 500 <= g.num_nodes <= 1500 and g.node_type_names == ["A", "B", "C"]
    train, valid, test = (g.facts(s) for s in ("train", "valid", "test"))
    assert 100 <= len(valid) <= 1000 and 100 <= len(test) <= 1000
    # held-out facts are target facts, disjoint from training, derivable from train base facts
    rows = {tuple(x) for x in train.tolist()}
    for held in (valid, test):
        assert held[:, 1].min() >= len(BASE)
        assert not rows & {tuple(x) for x in held.tolist()}
    base = train[train[:, 1] < len(BASE)].numpy()
    derived = _brute_force_targets(base)
    for h, r, t in test.tolist():
        assert (h, t) in derived[TARGETS[r - len(BASE)][0]]
    # not trivial: few test pairs are also joined by a direct training edge
    pairs = {(h, t) for h, _, t in train.tolist()} | {(t, h) for h, _, t in train.tolist()}
    direct = np.mean([(h, t) in pairs for h, _, t in test.tolist()])
    assert direct < 0.2
    # every target relation appears in test
    assert set(test[:, 1].tolist()) == set(range(len(BASE), len(BASE) + len(TARGETS)))


def test_rule_kg_deterministic(tmp_path):
    a = open_dataset(
        build_dataset(
            "synthetic:rule_kg", tmp_path / "a", synthetic={"num_entities": 300, "seed": 5}
        )
    )
    b = open_dataset(
        build_dataset(
            "synthetic:rule_kg", tmp_path / "b", synthetic={"num_entities": 300, "seed": 5}
        )
    )
    c = open_dataset(
        build_dataset(
            "synthetic:rule_kg", tmp_path / "c", synthetic={"num_entities": 300, "seed": 6}
        )
    )
    for s in ("train", "valid", "test"):
        assert torch.equal(a.graph_data().facts(s), b.graph_data().facts(s))
    assert a.manifest["files"] == b.manifest["files"]  # byte-identical files (sha256)
    assert not torch.equal(a.graph_data().facts("test"), c.graph_data().facts("test"))
    with pytest.raises(StorageError, match="unknown synthetic parameter 'num_entitys'"):
        build_dataset("synthetic:rule_kg", tmp_path / "d", synthetic={"num_entitys": 3})


def test_rule_kg_inductive(tmp_path):
    ds = open_dataset(
        build_dataset(
            "synthetic:rule_kg_inductive", tmp_path / "i", synthetic={"num_entities": 400}
        ),
        verify=True,
    )
    tr, te = ds.graph_data("train"), ds.graph_data("test")
    assert ds.inductive and not set(tr.entity_names) & set(te.entity_names)
    assert len(tr.facts("valid")) > 0 and len(te.facts("test")) > 0
    assert len(tr.facts("test")) == 0 and len(te.facts("valid")) == 0
    base = te.facts("train")
    derived = _brute_force_targets(base[base[:, 1] < len(BASE)].numpy())
    for h, r, t in te.facts("test").tolist():
        assert (h, t) in derived[TARGETS[r - len(BASE)][0]]


def test_trisqr_graphs():
    graphs = trisqr_graphs(num_pairs=100, seed=0)
    assert len(graphs) == 200
    train = [g for g in graphs if g.split == "train"]
    test = [g for g in graphs if g.split == "test"]
    assert len(train) == 140 and len(test) == 60
    q = lambda gs: sum(int((g.triples[:, 1] == 0).sum()) for g in gs)  # noqa: E731
    assert q(train) == 490 and q(test) == 210
    for g in graphs:
        t = g.triples
        assert t.dtype == torch.int64 and t.shape[1] == 3
        size = 3 if g.kind == "tri" else 4
        assert g.num_nodes == 5 + 2 * size
        queries = t[t[:, 1] == 0]
        assert set(queries[:, 0].tolist()) == {g.source} and g.source < 5
        assert sorted(queries[:, 2].tolist()) == sorted(g.positives)
        edges = {(h, r, tt) for h, r, tt in t[t[:, 1] != 0].tolist()}
        pos_rel = 1 if g.kind == "tri" else 2
        # positives form a directed cycle of pos_rel, negatives one of the other relation
        for nodes, rel in ((g.positives, pos_rel), (g.negatives, 3 - pos_rel)):
            assert len(nodes) == size
            for i in range(size):
                assert (nodes[i], rel, nodes[(i + 1) % size]) in edges
        # the G_init part is shared by both graphs of a pair
    for a, b in zip(graphs[0::2], graphs[1::2], strict=True):
        init = lambda g: {tuple(x) for x in g.triples.tolist() if x[0] < 5 and x[2] < 5}  # noqa: E731
        assert a.pair == b.pair and a.source == b.source and init(a) == init(b)
    again = trisqr_graphs(num_pairs=100, seed=0)
    assert all(torch.equal(x.triples, y.triples) for x, y in zip(graphs, again, strict=True))


def test_trisqr_dataset(tmp_path):
    ds = open_dataset(build_dataset("synthetic:trisqr", tmp_path / "t"), verify=True)
    tr, te = ds.graph_data("train"), ds.graph_data("test")
    assert ds.relation_names == ["r0", "r1", "r2"] and ds.inductive
    assert tr.num_nodes == 70 * (11 + 13) and te.num_nodes == 30 * (11 + 13)
    assert int((tr.facts("train")[:, 1] == 0).sum()) == 490
    assert len(te.facts("test")) == 210 and bool((te.facts("test")[:, 1] == 0).all())
    assert int((te.facts("train")[:, 1] == 0).sum()) == 0  # test queries are not edges
    # r0 is query-only: the training message graph has the r1/r2 edges (and inverses) only
    assert tr.query_only_relations == [0] and te.query_only_relations == []
    assert tr.graph().num_edges == 2 * (len(tr.facts("train")) - 490)
    assert set(tr.graph().rel.unique().tolist()) == {1, 2, 4, 5}


def test_biokg_scale_reduced(tmp_path):
    g = generate({"scale": 0.01})
    f = g["facts"]
    assert [len(f[s]) for s in ("train", "valid", "test")] == [47627, 1629, 1629]
    assert g["type_sizes"] == [int(round(s * 0.01)) for s in TYPE_SIZES]
    allf = np.concatenate(list(f.values()))
    assert len(np.unique(allf, axis=0)) == len(allf)  # distinct facts
    assert allf[:, 1].max() == 50 and len(np.unique(allf[:, 1])) == 51
    deg = np.bincount(np.concatenate([allf[:, 0], allf[:, 2]]))
    assert deg.max() > 10 * deg.mean()  # skewed degrees
    types = g["node_types"]
    assert len(np.unique(types)) == 5
    # same signature for every fact of a relation
    sig = {(r, types[h], types[t]) for h, r, t in allf[:2000].tolist()}
    assert len({s[0] for s in sig}) == len(sig)
    # via TSV: identical to the direct dataset (the benchmark's conversion path)
    write_tsv(tmp_path / "tsv", {"scale": 0.01})
    a = open_dataset(
        build_dataset(
            "tsv:transductive", tmp_path / "a", raw_path=tmp_path / "tsv", node_types="prefix"
        )
    ).graph_data()
    b = open_dataset(
        build_dataset("synthetic:biokg_scale", tmp_path / "b", synthetic={"scale": 0.01})
    ).graph_data()
    assert a.num_nodes == b.num_nodes and a.graph().num_edges == b.graph().num_edges == 2 * 47627
    assert sorted(a.node_type_names) == sorted(b.node_type_names)
