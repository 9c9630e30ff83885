"""``eval.filter=facts``: an inductive test split ranked as the paper's code ranks it.

The paper's code (HxyScotthuang/CMPNN ``cmpnn/task.py``,
``InductiveKnowledgeGraphCompletion.target``) filters a test ranking with the true answers
found in the inductive fact graph only: the other test (and valid) answers count as
negatives.  ``eval.filter=facts`` does the same; the test compares the product's ranks on a
real inductive dataset with the transcription of that code in
``tests/unit/evaluation/test_metrics.py``.
"""

from __future__ import annotations

import torch

from cmpnn_dist.config import ModelConfig
from cmpnn_dist.convert.prepare import build_dataset
from cmpnn_dist.evaluation.metrics import hits_at_k_with_negatives
from cmpnn_dist.evaluation.ranking import rank_split
from cmpnn_dist.model import CMPNN
from cmpnn_dist.training.data import load_train_data
from tests.helpers.paper_metrics import paper_evaluate


def _ranks(model, split, num_relations):
    table = rank_split(
        model, split.graph, split.queries, split.filter_triples, num_relations=num_relations
    )
    return table


def test_facts_filter_ranks_as_the_paper_code(tmp_path):
    path = build_dataset(
        "synthetic:rule_kg_inductive", tmp_path / "d", synthetic={"num_entities": 240}
    )
    facts = load_train_data(path, "facts")
    every = load_train_data(path, "all")
    r = facts.num_relations
    torch.manual_seed(0)
    model = CMPNN(ModelConfig(num_layers=2, hidden_dim=8, decoder_hidden_dim=8), r).double()
    model.eval()
    test = facts.test
    fact_graph = [tuple(f) for f in test.filter_triples.tolist()]
    assert len(fact_graph) == test.graph.num_edges // 2  # the graph's own facts (no inverses)
    # the paper's code: one row per (test triple, direction), tail then head prediction
    with torch.no_grad():
        rows = []
        for h, q, t in test.queries.tolist():
            rows.append(model(test.graph, torch.tensor([h]), torch.tensor([q]))[0])
            rows.append(model(test.graph, torch.tensor([t]), torch.tensor([q + r]))[0])
    pred = torch.stack(rows)
    want_hits, mask, target = paper_evaluate(fact_graph, test.queries, pred)
    want_rank = torch.sum((pred.gather(-1, target[:, None]) <= pred) & mask, dim=-1) + 1

    with torch.no_grad():
        got = _ranks(model, test, r)
    key = lambda h, q, t, head: (h, q, t, bool(head))  # noqa: E731
    ours = {
        key(*x): (int(k), int(c))
        for *x, k, c in zip(
            got.heads.tolist(), got.relations.tolist(), got.tails.tolist(),
            got.head_direction.tolist(), got.rank.tolist(), got.candidates.tolist(),
            strict=True,
        )
    }  # fmt: skip
    assert len(ours) == len(pred)
    ranks, cands = [], []
    for i, (h, q, t) in enumerate(test.queries.tolist()):
        for j, head in enumerate((False, True)):
            rank, cand = ours[key(h, q, t, head)]
            # the paper's ranking counts the target against itself, its mask holds the target
            assert rank + 1 == int(want_rank[2 * i + j])
            assert cand + 1 == int(mask[2 * i + j].sum())
            ranks.append(rank)
            cands.append(cand)
    got_hits = hits_at_k_with_negatives(torch.tensor(ranks), torch.tensor(cands), 10, 50, "paper")
    torch.testing.assert_close(got_hits, want_hits, rtol=0, atol=1e-9)

    # eval.filter=all (the default) removes the other test answers too: fewer candidates
    with torch.no_grad():
        full = _ranks(model, every.test, r)
    assert every.test.filter_triples.shape[0] > test.filter_triples.shape[0]
    assert int(full.candidates.sum()) < int(got.candidates.sum())
    assert torch.equal(facts.valid.queries, every.valid.queries)
