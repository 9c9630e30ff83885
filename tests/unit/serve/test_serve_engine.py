"""The server's engine without the server: a batch of ``/predict`` requests with different
relations and tail types, answered by one forward pass, against the Python API.

The model is the one ``tests/unit/predict/test_predict.py`` trains in this process (the
rule-planted KG, node types A, B, C; each relation's tails have one type).  Reference:
``Predictor.predict`` of each request alone (every candidate, scores and known flags), and the
node types of the relation's tails in the stored training facts.
``tests/integration/test_serve.py`` drives the same engine through Ray Serve and HTTP
(integration tier).
"""

from __future__ import annotations

import numpy as np
import pytest

from cmpnn_dist.predict import Predictor
from cmpnn_dist.serve.engine import Engine, RequestError
from tests.helpers.predict import train_rule_model


@pytest.fixture(scope="module")
def predictor(tmp_path_factory) -> Predictor:
    return Predictor.from_checkpoint(
        train_rule_model(tmp_path_factory.mktemp("engine")), device="cpu"
    )


@pytest.fixture(scope="module")
def engine(predictor) -> Engine:
    return Engine(predictor, max_batch_size=32, max_k=50)


def _first_of_type(predictor: Predictor, type_name: str) -> str:
    names = predictor.dataset.node_type_names
    types = predictor.node_types.numpy()
    return predictor.entities.names[int(np.flatnonzero(types == names.index(type_name))[0])]


def _tail_types(predictor: Predictor, relation: str) -> set[int]:
    """Types of the relation's tails in the stored training facts (the brute-force table)."""
    train = predictor.dataset.graph_data("train").facts("train").numpy()
    rid = predictor.relations.names.index(relation)
    return set(predictor.node_types.numpy()[train[train[:, 1] == rid][:, 2]].tolist())


def _check_like_the_api(predictor: Predictor, body: dict, got: dict) -> None:
    """``got`` holds the ``k`` best candidates of the request's relation types (and
    ``tail_type``), with the API's scores and known flags; order within exact ties free."""
    full = predictor.predict(head=body["head"], relation=body["relation"], topk=10_000)
    types = predictor.node_types.numpy()
    allowed = _tail_types(predictor, body["relation"])
    if "tail_type" in body:
        allowed &= {predictor.dataset.node_type_names.index(body["tail_type"])}
    full = full[np.isin(types[full["tail_id"].to_numpy()], list(allowed))]
    want = full.head(body["k"])
    answers = got["answers"]
    assert (got["head"], got["relation"], got["k"]) == (body["head"], body["relation"], body["k"])
    assert len(answers) == len(want) > 0
    assert [a["rank"] for a in answers] == list(range(1, len(want) + 1))
    np.testing.assert_allclose([a["score"] for a in answers], want["score"], atol=1e-5)
    by_tail = full.set_index("tail")
    for a in answers:
        assert a["tail"] in by_tail.index, (body, a)  # a candidate of this request's types
        assert types[a["tail_id"]] in allowed
        assert a["score"] == pytest.approx(by_tail.loc[a["tail"], "score"], abs=1e-5)
        assert (a["known"] or "") == by_tail.loc[a["tail"], "known"]


def test_batched_requests_with_different_relations_and_tail_types(engine, predictor):
    a, c = _first_of_type(predictor, "A"), _first_of_type(predictor, "C")
    bodies = [
        {"head": a, "relation": "t0", "k": 12},  # tails of type C
        {"head": a, "relation": "b0", "k": 7, "tail_type": "B"},  # tails of type B
        {"head": c, "relation": "b5", "k": 9},  # tails of type A
        {"head": a, "relation": "t0", "k": 3, "tail_type": "C"},  # the first pair again
    ]
    assert len({frozenset(_tail_types(predictor, b["relation"])) for b in bodies}) == 3
    queries = [engine.parse_predict(b) for b in bodies]
    forwards = engine.counters["forwards"]
    answers = engine.predict_many(queries)
    assert engine.counters["forwards"] - forwards == 1  # one forward pass for the batch
    assert len(answers) == len(bodies)
    for body, got in zip(bodies, answers, strict=True):
        _check_like_the_api(predictor, body, got)


def test_a_tail_type_the_relation_has_no_tails_of_is_refused(engine, predictor):
    a = _first_of_type(predictor, "A")
    with pytest.raises(RequestError, match="not a tail type of relation 't0'") as info:
        engine.parse_predict({"head": a, "relation": "t0", "tail_type": "A"})
    assert info.value.status == 422
    assert engine.tail_types(predictor.relations.names.index("t0")) == ["C"]
