"""Both-direction filtered evaluation against a brute-force computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.evaluation import AnswerIndex, evaluate, rank_queries, ranking_metrics
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN

N, R = 9, 2


class TableModel(nn.Module):
    """Scores from a fixed random table [2R, N, N]: score(u, q, v) = table[q, u, v]."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        # rounded so that ties occur
        self.table = nn.Parameter(torch.round(torch.rand(2 * R, N, N, generator=gen) * 4))

    def forward(self, graph, heads, rels, edge_mask=None):
        assert not torch.is_grad_enabled() and not self.training
        return self.table[rels, heads]


def _facts(seed=0, count=20):
    rng = np.random.default_rng(seed)
    f = np.stack(
        [rng.integers(0, N, count), rng.integers(0, R, count), rng.integers(0, N, count)], 1
    )
    return torch.from_numpy(np.unique(f, axis=0))


def brute_force_ranks(table, queries, known):
    known = {tuple(f) for f in known.tolist()}
    ranks, nums = [], []
    for direction in ("tail", "head"):
        for h, r, t in queries.tolist():
            if direction == "tail":
                u, q, target = h, r, t
                true = {v for v in range(N) if (h, r, v) in known}
            else:
                u, q, target = t, r + R, h
                true = {v for v in range(N) if (v, r, t) in known}
            s = table[q, u]
            others = [v for v in range(N) if v != target and v not in true]
            ranks.append(1 + sum(1 for v in others if s[v] >= s[target]))
            nums.append(len(others))
    return torch.tensor(ranks), torch.tensor(nums)


def test_answer_index_matches_python_sets():
    facts = _facts()
    index = AnswerIndex(facts, R)
    heads = torch.arange(N).repeat(2 * R)
    rels = torch.arange(2 * R).repeat_interleave(N)
    mask = index.mask(heads, rels, N)
    known = {tuple(f) for f in facts.tolist()}
    for i in range(len(heads)):
        u, q = int(heads[i]), int(rels[i])
        for v in range(N):
            fact = (u, q, v) if q < R else (v, q - R, u)
            assert bool(mask[i, v]) == (fact in known)


def test_evaluate_equals_brute_force_both_directions():
    facts = _facts()
    queries, known = facts[:7], facts
    graph = graph_from_triples(N, R, facts.numpy())
    model = TableModel()
    model.train()
    ranks, nums = rank_queries(model, graph, queries, known, num_relations=R, batch_size=3)
    want_ranks, want_nums = brute_force_ranks(model.table.detach(), queries, known)
    assert ranks.tolist() == want_ranks.tolist()
    assert nums.tolist() == want_nums.tolist()
    out = evaluate(model, graph, queries, known, num_relations=R, batch_size=4, progress=True)
    want = ranking_metrics(want_ranks, want_nums)
    for key, value in want.items():
        assert out[key] == pytest.approx(value)
    assert out["num_queries"] == 14
    assert model.training  # mode restored
    assert max(want_ranks) > 1 and min(want_ranks) >= 1


def test_evaluate_max_queries_and_real_model():
    facts = _facts(seed=1, count=30)
    graph = graph_from_triples(N, R, facts.numpy())
    torch.manual_seed(0)
    model = CMPNN(ModelConfig(num_layers=2, hidden_dim=8, decoder_hidden_dim=8), R)
    out = evaluate(model, graph, facts, facts, num_relations=R, max_queries=5)
    assert out["num_queries"] == 10
    # the oracle: every (u, q) scored one at a time by the model, ranked by brute force
    model.eval()
    with torch.no_grad():
        table = torch.stack(
            [
                torch.cat([model(graph, torch.tensor([u]), torch.tensor([q])) for u in range(N)])
                for q in range(2 * R)
            ]
        )
    ranks, nums = brute_force_ranks(table, facts[:5], facts)
    want = ranking_metrics(ranks, nums)
    assert len(set(ranks.tolist())) > 2  # an untrained model still ranks unevenly
    for key, value in want.items():
        assert out[key] == pytest.approx(value, abs=1e-12), key
