"""The tensors one training run needs, cut out of a storage ``Dataset``.

Transductive (one graph "train"): every split passes messages over ``graph_data("train")``'s
graph (built from its train facts); valid / test queries are its valid / test facts and
evaluation filters with train + valid + test facts.

Inductive (GraIL: graphs "train" and "test"): training and validation use graph "train"
(filter: its train + valid + test facts); testing uses graph "test" whose message graph is its
own train facts, with queries its test facts and filter its train + valid + test facts
(``eval.filter=facts``: each split's graph's train facts only, as the paper's code).

``train.filter_triples`` holds the *training facts only*: it is what strict negatives avoid
during training, and must not reveal validation / test facts to the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from typing import Any

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph


@dataclass
class SplitData:
    """One split: message-passing graph, queries int64 [F, 3], filter facts int64 [G, 3];
    ``node_types`` int64 [N] of the graph's nodes (None: untyped), ``negatives`` OGB's
    official ``{"head_neg", "tail_neg"}`` int64 [F, K] of the queries (None: not shipped) and
    ``labeled_negatives`` int64 [Q, 3]: false facts the dataset declares for this split
    (TRI-SQR's counterpart pairs), scored with the queries for ``accuracy``; None: none."""

    graph: Graph
    queries: Tensor
    filter_triples: Tensor
    node_types: Tensor | None = None
    negatives: dict[str, Tensor] | None = None
    labeled_negatives: Tensor | None = None


@dataclass
class TrainData:
    """Everything :func:`cmpnn_dist.training.loop.fit` needs; ``num_relations`` is |R|."""

    num_relations: int
    inductive: bool
    train: SplitData
    valid: SplitData
    test: SplitData

    @property
    def num_nodes(self) -> int:
        """|V| of the training graph."""
        return self.train.graph.num_nodes


def _facts(gd: Any, split: str) -> Tensor:
    f = gd.facts(split)
    if f is None:
        return torch.empty(0, 3, dtype=torch.long)
    return torch.as_tensor(f, dtype=torch.long).reshape(-1, 3)


def _all_facts(gd: Any) -> Tensor:
    return torch.cat([_facts(gd, s) for s in ("train", "valid", "test")])


def load_train_data(ds: Any, eval_filter: str = "all") -> TrainData:
    """Build :class:`TrainData` from a dataset folder (``str`` / ``Path``, opened with
    :func:`cmpnn_dist.storage.open_dataset`) or an opened storage ``Dataset``.

    ``eval_filter`` (``eval.filter``): ``all`` filters valid / test rankings with every fact
    of their graph; ``facts`` filters an inductive split with its graph's train facts only
    (the facts it passes messages over), as the paper's code does.  Transductive splits
    filter with every fact either way."""
    if eval_filter not in ("all", "facts"):
        raise ValueError(f"eval_filter must be all or facts, got {eval_filter!r}")
    if isinstance(ds, str | PathLike):
        from cmpnn_dist.storage import open_dataset

        ds = open_dataset(ds)
    g_train = ds.graph_data("train")
    graph = g_train.graph()
    train_facts = _facts(g_train, "train")
    types = g_train.node_types
    train = SplitData(graph, train_facts, train_facts, types)
    negs = getattr(ds, "negatives", lambda split: None)
    if ds.inductive:
        g_test = ds.graph_data("test")
        known = _all_facts if eval_filter == "all" else (lambda gd: _facts(gd, "train"))
        valid = SplitData(graph, _facts(g_train, "valid"), known(g_train), types)
        test = SplitData(g_test.graph(), _facts(g_test, "test"), known(g_test), g_test.node_types)
    else:
        filt = _all_facts(g_train)
        valid = SplitData(graph, _facts(g_train, "valid"), filt, types, negs("valid"))
        test = SplitData(graph, _facts(g_train, "test"), filt, types, negs("test"))
    for name, split in (("valid", valid), ("test", test)):
        declared = ds.source.get("labeled_negatives", {}).get(name)
        if declared is not None:
            split.labeled_negatives = torch.as_tensor(declared, dtype=torch.long).reshape(-1, 3)
    return TrainData(int(ds.num_relations), bool(ds.inductive), train, valid, test)


def train_data_from_triples(
    num_nodes: int,
    num_relations: int,
    train: Tensor,
    valid: Tensor,
    test: Tensor,
) -> TrainData:
    """A transductive :class:`TrainData` straight from fact tensors (tests, small graphs)."""
    from cmpnn_dist.graph import graph_from_triples

    train, valid, test = (
        torch.as_tensor(x, dtype=torch.long).reshape(-1, 3) for x in (train, valid, test)
    )
    graph = graph_from_triples(num_nodes, num_relations, train)
    filt = torch.cat([train, valid, test])
    return TrainData(
        num_relations,
        False,
        SplitData(graph, train, train),
        SplitData(graph, valid, filt),
        SplitData(graph, test, filt),
    )
