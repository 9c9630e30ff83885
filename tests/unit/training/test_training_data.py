"""load_train_data on real storage datasets (transductive and inductive GraIL-style)."""

from __future__ import annotations

import numpy as np
import torch

from cmpnn_dist.storage import GraphSpec, open_dataset, write_dataset
from cmpnn_dist.training.data import load_train_data


def _facts(rows):
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


def _spec(n, train, valid, test):
    names = [f"e{i}" for i in range(n)]
    facts = {"train": _facts(train), "valid": _facts(valid), "test": _facts(test)}
    return GraphSpec(num_nodes=n, entity_names=names, facts=facts)


def _edges(graph):
    dst = graph.dst()
    return sorted(zip(graph.src.tolist(), graph.rel.tolist(), dst.tolist(), strict=True))


def test_transductive(tmp_path):
    train, valid, test = [[0, 0, 1], [1, 1, 2], [2, 0, 3]], [[0, 1, 3]], [[3, 1, 0]]
    path = write_dataset(
        tmp_path / "t",
        name="t",
        relation_names=["a", "b"],
        graphs={"train": _spec(5, train, valid, test)},
        inductive=False,
        num_shards=2,
    )
    d = load_train_data(open_dataset(path))
    assert d.num_relations == 2 and not d.inductive and d.num_nodes == 5
    assert d.valid.graph is d.train.graph and d.test.graph is d.train.graph
    want = sorted([(h, r, t) for h, r, t in train] + [(t, r + 2, h) for h, r, t in train])
    assert _edges(d.train.graph) == want
    assert d.train.queries.tolist() == train and d.train.filter_triples.tolist() == train
    assert d.valid.queries.tolist() == valid and d.test.queries.tolist() == test
    for split in (d.valid, d.test):
        assert sorted(split.filter_triples.tolist()) == sorted(train + valid + test)
        assert split.filter_triples.dtype == torch.int64


def test_inductive(tmp_path):
    tr = ([[0, 0, 1], [1, 1, 2]], [[2, 0, 0]], [])
    te = ([[0, 1, 1], [1, 0, 2], [2, 1, 3]], [], [[3, 0, 0], [0, 0, 3]])
    path = write_dataset(
        tmp_path / "i",
        name="i",
        relation_names=["a", "b"],
        graphs={"train": _spec(3, *tr), "test": _spec(4, *te)},
        inductive=True,
        num_shards=1,
    )
    d = load_train_data(open_dataset(path))
    assert d.inductive and d.num_nodes == 3
    assert d.valid.graph is d.train.graph and d.test.graph.num_nodes == 4
    assert d.valid.queries.tolist() == tr[1]
    assert sorted(d.valid.filter_triples.tolist()) == sorted(tr[0] + tr[1])
    assert d.test.queries.tolist() == te[2]
    assert sorted(d.test.filter_triples.tolist()) == sorted(te[0] + te[2])
    assert len(_edges(d.test.graph)) == 2 * len(te[0])
