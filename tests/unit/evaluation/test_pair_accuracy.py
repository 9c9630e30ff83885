"""TRI-SQR's metric: accuracy over labeled query pairs (paper appendix H)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.convert import build_dataset
from cmpnn_dist.convert.synthetic import trisqr_graphs
from cmpnn_dist.evaluation import pair_accuracy, sign_accuracy, triple_logits
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.storage import open_dataset
from cmpnn_dist.training.data import load_train_data


class TableModel(nn.Module):
    """Logits read from a fixed table [N, 2|R|, N]: a model whose scores we know by hand."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)

    def forward(self, graph, heads, rels, edge_mask=None):  # noqa: ANN001, ANN201
        return self.table[heads, rels]


def test_sign_accuracy_hand_computed():
    # positives right: 2.0, 0.5 (not -1.0); negatives right: -3.0, 0.0 (p = 0.5 is "false")
    # (not 1.0): 4 of 6
    pos = torch.tensor([2.0, -1.0, 0.5])
    neg = torch.tensor([-3.0, 0.0, 1.0])
    assert sign_accuracy(pos, neg) == pytest.approx(4 / 6)
    assert sign_accuracy(torch.tensor([1e-6]), torch.tensor([])) == 1.0
    with pytest.raises(ValueError):
        sign_accuracy(torch.tensor([]), torch.tensor([]))


def test_pair_accuracy_hand_computed_on_a_known_score_table():
    n, r2 = 4, 2
    table = torch.zeros(n, r2, n)
    table[0, 0] = torch.tensor([0.0, 3.0, -2.0, 1.0])  # query (0, r0)
    table[2, 0] = torch.tensor([-1.0, -1.0, 0.0, 5.0])  # query (2, r0)
    table[2, 1] = torch.tensor([9.0, 9.0, 9.0, 9.0])  # (2, r1): another relation, same head
    model = TableModel(table)
    graph = graph_from_triples(n, 1, torch.tensor([[0, 0, 1]]))
    positives = torch.tensor([[0, 0, 1], [0, 0, 2], [2, 0, 3], [2, 1, 0]])  # 3.0 -2.0 5.0 9.0
    negatives = torch.tensor([[0, 0, 3], [2, 0, 1], [2, 0, 2]])  # 1.0 -1.0 0.0
    expected = torch.tensor([3.0, -2.0, 5.0, 9.0])
    for bs in (1, 2, 16):  # facts grouped by query and batched: the order is kept
        assert torch.equal(triple_logits(model, graph, positives, batch_size=bs), expected)
    # right: 3.0, 5.0, 9.0 of the positives; -1.0, 0.0 of the negatives -> 5 of 7
    got = pair_accuracy(model, graph, positives, negatives, batch_size=2)
    assert got == {"accuracy": pytest.approx(5 / 7), "num_pairs": 7.0}


def test_triple_logits_match_one_forward_per_fact():
    torch.manual_seed(0)
    g = trisqr_graphs(num_pairs=1, seed=3)[0]
    edges = g.triples[g.triples[:, 1] != 0]
    graph = graph_from_triples(g.num_nodes, 3, edges)
    model = CMPNN(ModelConfig(message=2, readout="sum", num_layers=2, hidden_dim=8), 3,
                  OpsConfig(impl="reference")).eval()  # fmt: skip
    facts = torch.tensor([[g.source, 0, v] for v in g.positives + g.negatives])
    with torch.no_grad():
        got = triple_logits(model, graph, facts, batch_size=3)
        slow = [model(graph, f[:1], f[1:2])[0, f[2]].item() for f in facts]
    assert got.tolist() == pytest.approx(slow, abs=1e-6)


def test_trisqr_dataset_declares_the_counterpart_negatives(tmp_path):
    graphs = trisqr_graphs(num_pairs=10, seed=0)
    ds = open_dataset(
        build_dataset("synthetic:trisqr", tmp_path / "t", synthetic={"num_pairs": 10})
    )
    data = load_train_data(ds)
    test_graphs = [g for g in graphs if g.split == "test"]
    # the test graph is the disjoint union of the test graphs in order: rebuild the expected
    # positives / negatives from the generator's own lists
    off, pos, neg = 0, [], []
    for g in test_graphs:
        pos += [(g.source + off, 0, v + off) for v in g.positives]
        neg += [(g.source + off, 0, v + off) for v in g.negatives]
        off += g.num_nodes
    assert data.test.queries.tolist() == [list(x) for x in pos]
    assert data.test.labeled_negatives.tolist() == [list(x) for x in neg]
    assert len(neg) == 3 * 3 + 3 * 4  # 3 test pairs: a triangle and a square each
    assert data.valid.labeled_negatives is None


def test_train_conf_trisqr_reports_accuracy_beside_mrr(tmp_path):
    """``python -m cmpnn_dist.train conf=trisqr``'s result carries test accuracy, equal to the
    metric recomputed with one forward per fact on the trained model."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.cli.train import summarize
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.training.loop import fit

    cfg = compose_config("trisqr", [f"storage_root={tmp_path}", "+data.synthetic.num_pairs=6",
                                    "train.max_steps=3", "train.progress=false",
                                    "model.num_layers=2", "run_name=t"])  # fmt: skip
    data = load_train_data(open_dataset(ensure_dataset(cfg)))
    result = fit(cfg, data, run_dir=tmp_path / "runs" / "t")
    out = summarize(result)
    assert {"mrr", "accuracy", "num_pairs"} <= set(out["test"])
    model, split = result.model.eval(), data.test
    right = 0
    with torch.no_grad():
        for facts, label in ((split.queries, True), (split.labeled_negatives, False)):
            for f in facts:
                right += int((model(split.graph, f[:1], f[1:2])[0, f[2]].item() > 0) == label)
    total = len(split.queries) + len(split.labeled_negatives)
    assert out["test"]["num_pairs"] == total == 2 * 2 * 7  # 2 test pairs, 7 + 7 labeled pairs
    assert out["test"]["accuracy"] == pytest.approx(right / total)
