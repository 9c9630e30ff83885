"""``Predictor.rank``, the one ranking of predict, batch scoring and the server, against a slow
obvious reference.

The dataset is the rule-planted KG (120 entities, node types A, B, C, typed relations, known
train / valid / test facts); the "model" is a fixed table of small integer logits per
``(anchor, relation, entity)`` (ties everywhere, at the top-k cut too).  Reference: every
query alone, ``Predictor.scores`` of all entities, its own candidate mask, then Python's
``sorted`` by (-score, entity id) (the documented tie rule of ``predict/rank.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.predict import Predictor
from cmpnn_dist.predict.batch_scorer import BatchScorer
from cmpnn_dist.serve.engine import Engine, TailQuery
from cmpnn_dist.storage import open_dataset


class TableModel(nn.Module):
    """``model(graph, heads [B], rels [B]) -> logits [B, N]``: rows of a fixed table of
    integers in [0, 4) (so many candidates tie)."""

    def __init__(self, num_nodes: int, num_relations: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        table = torch.randint(0, 4, (num_nodes, 2 * num_relations, num_nodes), generator=g)
        self.register_buffer("table", table.float())

    def forward(self, graph, heads, rels):
        return self.table[heads, rels]


@pytest.fixture(scope="module")
def predictor(tmp_path_factory) -> Predictor:
    root = tmp_path_factory.mktemp("rank")
    path = build_dataset(
        "synthetic:rule_kg", root / "kg", num_shards=1, synthetic={"num_entities": 120}
    )
    ds = open_dataset(path)
    model = TableModel(ds.graph_data("train").num_nodes, int(ds.num_relations))
    return Predictor(model, ds, batch_size=3, device="cpu")  # several chunks of 3 pairs


def _reference(p: Predictor, anchor: int, rel: int, k: int, keep: torch.Tensor, known: str):
    """(ids, scores, codes) of one query: every entity scored, masked, sorted by hand."""
    one = (torch.tensor([anchor]), torch.tensor([rel]))
    scores = p.scores(*one)[0].tolist()
    codes = p.known_codes(*one)[0].tolist()
    kept = [v for v in range(len(scores)) if keep[v] and (known == "flag" or codes[v] == 0)]
    ids = sorted(kept, key=lambda v: (-scores[v], v))[:k]
    return ids, [scores[v] for v in ids], [codes[v] for v in ids], kept


def _batch(p: Predictor):
    """24 queries: tail and head prediction over several relations, the same pairs repeated
    with other tail-type masks, and a random extra mask per query."""
    r = p.num_relations
    g = torch.Generator().manual_seed(1)
    facts = p.dataset.graph_data("train").facts("valid")[:6]
    anchors, rels = [], []
    for h, rel, t in facts.tolist():  # known facts among the candidates
        anchors += [h, h, t]
        rels += [rel, rel, rel + r]
    for rel in (0, 3, 5, r + 1, r + 4):  # base relations and inverses
        a = int(torch.randint(0, p.graph.num_nodes, (1,), generator=g))
        anchors += [a, a]
        rels += [rel, rel]
    anchors, rels = torch.tensor(anchors), torch.tensor(rels)
    b = anchors.numel()
    types = []  # a tail type of the query's relation, or -1: none asked
    for rel in rels.tolist():
        allowed = [-1, *torch.nonzero(p.allowed_types[rel]).flatten().tolist()]
        types.append(allowed[int(torch.randint(0, len(allowed), (1,), generator=g))])
    typed = p.candidate_mask(anchors, rels, torch.tensor(types))
    extra = torch.rand(b, p.graph.num_nodes, generator=g) < 0.7
    return anchors, rels, typed & extra


@pytest.mark.parametrize("known", ["flag", "filter"])
@pytest.mark.parametrize("k", [1, 7, 10_000])
def test_rank_equals_the_obvious_reference(predictor, known, k):
    anchors, rels, candidates = _batch(predictor)
    # the masks differ between queries, also between queries of one (anchor, relation)
    assert len({tuple(m.tolist()) for m in candidates}) == anchors.numel()
    ranked = predictor.rank(anchors, rels, k, candidates, known=known)
    n = predictor.graph.num_nodes
    assert ranked.ids.shape == (anchors.numel(), min(k, n))
    tied_cuts = 0
    for b in range(anchors.numel()):
        ids, scores, codes, kept = _reference(
            predictor, int(anchors[b]), int(rels[b]), k, candidates[b], known
        )
        c = int(ranked.counts[b])
        assert c == len(ids) == min(k, len(kept)) > 0, b
        assert ranked.ids[b, :c].tolist() == ids, b
        assert ranked.scores[b, :c].tolist() == scores, b
        assert ranked.known[b, :c].tolist() == codes, b
        assert ranked.ranks[b, :c].tolist() == list(range(1, c + 1)), b
        assert (ranked.ids[b, c:] == -1).all() and (ranked.ranks[b, c:] == 0).all()
        if c < len(kept):
            s = predictor.scores(anchors[b : b + 1], rels[b : b + 1])[0]
            tied_cuts += int((s[kept] == scores[-1]).sum()) > scores.count(scores[-1])
    if k < n:
        assert tied_cuts > 0  # the tie rule is exercised at the cut
    if known == "flag":
        assert (ranked.known > 0).any()  # known facts among the rows


def test_given_answers_get_their_rank_among_the_candidates(predictor):
    anchors, rels, candidates = _batch(predictor)
    every = (anchors * 7) % predictor.graph.num_nodes
    answers = torch.where(torch.arange(anchors.numel()) % 2 == 0, every, -1)
    ranked = predictor.rank(anchors, rels, 5, candidates, answers=answers)
    full = predictor.rank(anchors, rels, 5, candidates)
    for b in range(anchors.numel()):
        if answers[b] < 0:
            assert ranked.ids[b].tolist() == full.ids[b].tolist()
            continue
        s = predictor.scores(anchors[b : b + 1], rels[b : b + 1])[0]
        a = int(answers[b])
        assert int(ranked.counts[b]) == 1 and int(ranked.ids[b, 0]) == a
        assert float(ranked.scores[b, 0]) == float(s[a])
        assert int(ranked.ranks[b, 0]) == 1 + int((s[candidates[b]] > s[a]).sum())


def test_predict_batch_scorer_and_engine_build_their_rows_from_rank(predictor):
    p, r = predictor, predictor.num_relations
    names = p.entities.names
    anchors, rels = torch.tensor([5, 9, 5, 40]), torch.tensor([2, 2, 2 + r, 7])
    ranked = p.rank(anchors, rels, 6)
    frame = p.predict_batch(
        pd.DataFrame(
            {
                "head": [names[5], names[9], "?", names[40]],
                "relation": [p.relations.names[x % r] for x in rels.tolist()],
                "tail": ["?", "?", names[5], "?"],
            }
        ),
        topk=6,
    )
    qi, pos = ranked.flat()
    predicted = np.where(frame["target"] == "head", frame["head_id"], frame["tail_id"])
    assert frame["query_id"].tolist() == qi.tolist()
    assert predicted.tolist() == ranked.ids[qi, pos].tolist()
    assert frame["score"].tolist() == ranked.scores[qi, pos].double().tolist()

    table = BatchScorer(p, 2, 4, "filter")(np.array([5, 9, 11]))
    want = p.rank(torch.tensor([5, 9, 11]), torch.tensor([2, 2, 2]), 4, known="filter")
    qi, pos = want.flat()
    assert table.column("tail_id").to_pylist() == want.ids[qi, pos].tolist()
    assert table.column("rank").to_pylist() == want.ranks[qi, pos].tolist()

    engine = Engine(p, max_batch_size=8, max_k=50)
    tail_type = engine.tail_types(2)[-1]  # a tail type of relation 2
    c = engine.type_names.index(tail_type)
    rel2 = p.relations.names[2]
    queries = [
        TailQuery(names[5], rel2, 6, None, 5, 2, None),
        TailQuery(names[5], rel2, 3, tail_type, 5, 2, c),
        TailQuery(names[9], rel2, 2, tail_type, 9, 2, c),
    ]
    got = engine.predict_many(queries)
    a, q_rels = torch.tensor([5, 5, 9]), torch.tensor([2, 2, 2])
    want = p.rank(a, q_rels, 6, p.candidate_mask(a, q_rels, torch.tensor([-1, c, c])))
    for b, (q, answer) in enumerate(zip(queries, got, strict=True)):
        n = min(q.k, int(want.counts[b]))
        assert [x["tail_id"] for x in answer["answers"]] == want.ids[b, :n].tolist()
        assert [x["score"] for x in answer["answers"]] == want.scores[b, :n].tolist()
