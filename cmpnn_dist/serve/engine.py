"""What the server computes, without the server: JSON bodies in, JSON-ready dicts out.

:class:`Engine` wraps a :class:`~cmpnn_dist.predict.Predictor` (model loading, names, typed
candidates, known facts and the batched forward are the predict API's) and adds what HTTP
needs: request validation with one-line errors carrying a status code, many tail queries
answered by one forward pass (:meth:`Engine.predict_many`, what ``serve.batch`` hands it),
explanations with per-edge weights, name completion, and counters for ``/health``.

A tail query ``(h, r, ?)`` scores every entity v by ``logit(v | h, r)`` (one row of the
model's ``[B, N]`` output); candidates are the relation's tail types (and ``tail_type`` when
given); known facts are flagged with the split that holds them.  The ranking is
:meth:`Predictor.rank`'s (``predict/rank.py``), the one ``predict`` and batch scoring use.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import torch

from cmpnn_dist.errors import UsageError
from cmpnn_dist.predict.names import NameIndex
from cmpnn_dist.predict.rank import KNOWN_NAMES


class RequestError(Exception):
    """A request the server refuses: an HTTP status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class TailQuery:
    """A validated ``/predict`` request: names as given, ids resolved."""

    head: str
    relation: str
    k: int
    tail_type: str | None
    anchor: int
    rel: int
    type_id: int | None


# how a field's expected Python type reads in an error line: the JSON kind of value it takes
JSON_KINDS = {int: "an integer", str: "a string"}


def _fields(body: Any, required: dict[str, type], optional: dict[str, type]) -> dict[str, Any]:
    """The body's fields, checked: a JSON object holding ``required`` and maybe ``optional``
    keys of the given types (None for an optional one means absent)."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join([*required, *optional])
        raise RequestError(400, f"unknown field(s) {', '.join(unknown)}; allowed: {allowed}")
    out: dict[str, Any] = {}
    for key, kind in {**required, **optional}.items():
        value = body.get(key)
        if value is None:
            if key in required:
                raise RequestError(400, f"field {key!r} is missing")
            continue
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise RequestError(
                400, f"field {key!r} must be {JSON_KINDS.get(kind, kind.__name__)}, got {value!r}"
            )
        out[key] = value
    return out


class Engine:
    """Answers the server's requests with ``predictor``.

    ``max_batch_size``: the most tail queries one forward pass holds (the predictor's batch
    size is raised to it); ``max_k``: the most answers a request may ask for.
    """

    def __init__(self, predictor: Any, max_batch_size: int = 32, max_k: int = 1000) -> None:
        self.predictor = predictor
        predictor.batch_size = max(int(predictor.batch_size), int(max_batch_size))
        self.max_k = int(max_k)
        gd = predictor.dataset.graph_data(predictor.graph_name)
        self.type_names: list[str] = list(getattr(gd, "node_type_names", []) or [])
        self.types = NameIndex(self.type_names, "node type") if self.type_names else None
        names = predictor.entities.names
        self.sorted_names = sorted(names)
        self.counters = {"forwards": 0, "predict_requests": 0, "predict_batches": 0}
        self.counters["largest_batch"] = 0
        predictor.model.register_forward_hook(self._count_forward)

    def _count_forward(self, module: Any, args: Any, output: Any) -> None:
        self.counters["forwards"] += 1

    # ------------------------------------------------------------------ names
    def _resolve(self, index: NameIndex, name: str) -> int:
        try:
            return index.id(name)
        except UsageError as exc:
            raise RequestError(422, str(exc)) from None

    def tail_types(self, rel: int) -> list[str]:
        """Node types the relation's tails have in training (all when untyped)."""
        allowed = self.predictor.allowed_types
        if allowed is None or not self.type_names:
            return list(self.type_names)
        return [self.type_names[t] for t in torch.nonzero(allowed[rel]).flatten().tolist()]

    def entities(self, prefix: str, limit: int = 20) -> list[str]:
        """Up to ``limit`` entity names starting with ``prefix``, sorted."""
        i = bisect.bisect_left(self.sorted_names, prefix)
        out = []
        while i < len(self.sorted_names) and len(out) < limit:
            if not self.sorted_names[i].startswith(prefix):
                break
            out.append(self.sorted_names[i])
            i += 1
        return out

    def relations(self) -> dict[str, Any]:
        """Relation names, with the tail types of each, and the node types."""
        names = self.predictor.relations.names
        return {
            "relations": [
                {"name": n, "tail_types": self.tail_types(i)} for i, n in enumerate(names)
            ],
            "node_types": self.type_names,
            "num_entities": len(self.sorted_names),
        }

    # ------------------------------------------------------------------ predict
    def parse_predict(self, body: Any) -> TailQuery:
        """A ``/predict`` body ``{"head", "relation", "k"?, "tail_type"?}`` -> a query."""
        f = _fields(body, {"head": str, "relation": str}, {"k": int, "tail_type": str})
        k = f.get("k", 10)
        if not 1 <= k <= self.max_k:
            raise RequestError(400, f"field 'k' must be in [1, {self.max_k}], got {k}")
        anchor = self._resolve(self.predictor.entities, f["head"])
        rel = self._resolve(self.predictor.relations, f["relation"])
        type_id = None
        tail_type = f.get("tail_type")
        if tail_type is not None:
            if self.types is None:
                raise RequestError(422, "this graph has no node types: leave out 'tail_type'")
            type_id = self._resolve(self.types, tail_type)
            allowed = self.tail_types(rel)
            if tail_type not in allowed:
                raise RequestError(
                    422,
                    f"node type {tail_type!r} is not a tail type of relation {f['relation']!r} "
                    f"(its tails are {', '.join(allowed)})",
                )
        return TailQuery(f["head"], f["relation"], k, tail_type, anchor, rel, type_id)

    def predict_many(self, queries: list[TailQuery]) -> list[dict[str, Any]]:
        """The answers of every query, from one :meth:`Predictor.rank` call: one forward pass
        over their distinct ``(head, relation)`` pairs, each query's typed candidates
        (``candidate_mask``: the relation's tail types AND its ``tail_type``), the known-fact
        codes and the shared tie rule (equal scores keep entity-id order)."""
        p = self.predictor
        anchors = torch.tensor([q.anchor for q in queries], dtype=torch.long)
        rels = torch.tensor([q.rel for q in queries], dtype=torch.long)
        types = torch.tensor([-1 if q.type_id is None else q.type_id for q in queries])
        candidates = p.candidate_mask(anchors, rels, types.long())
        k = max((q.k for q in queries), default=1)
        ranked = p.rank(anchors, rels, k, candidates, known="flag")
        self.counters["predict_requests"] += len(queries)
        self.counters["predict_batches"] += 1
        self.counters["largest_batch"] = max(self.counters["largest_batch"], len(queries))
        names = p.entities.names
        out = []
        for b, q in enumerate(queries):
            n = min(q.k, int(ranked.counts[b]))  # a prefix of the top max(k)
            known = ranked.known[b].tolist()
            probabilities = torch.sigmoid(ranked.scores[b, :n].double())  # as the query alone
            answers = []
            for i in range(n):
                v = int(ranked.ids[b, i])
                answers.append(
                    {
                        "rank": int(ranked.ranks[b, i]),
                        "tail": names[v],
                        "tail_id": v,
                        "score": float(ranked.scores[b, i]),
                        "probability": float(probabilities[i]),
                        "known": KNOWN_NAMES[known[i]] or None,
                    }
                )
            out.append(
                {
                    "head": q.head,
                    "relation": q.relation,
                    "k": q.k,
                    "tail_type": q.tail_type,
                    "answers": answers,
                }
            )
        return out

    # ------------------------------------------------------------------ explain
    def explain(self, body: Any) -> dict[str, Any]:
        """A ``/explain`` body ``{"head", "relation", "tail", "k"?}`` -> the ``k`` (default 5,
        at most 20) most important head-to-tail paths, each edge with its weight (the
        gradient of the answer's logit in that edge's message at its layer)."""
        f = _fields(body, {"head": str, "relation": str, "tail": str}, {"k": int})
        k = f.get("k", 5)
        if not 1 <= k <= 20:
            raise RequestError(400, f"field 'k' must be in [1, 20], got {k}")
        p = self.predictor
        h = self._resolve(p.entities, f["head"])
        r = self._resolve(p.relations, f["relation"])
        t = self._resolve(p.entities, f["tail"])
        try:
            e = p.explain_ids(h, r, t, k=k)
        except UsageError as exc:  # e.g. a model whose layers take no edge weights
            raise RequestError(422, str(exc)) from None
        names, num_rel = e.entity_names, e.num_relations
        paths = []
        for i, (importance, edges) in enumerate(e.paths):
            weights = e.edge_weights[i]
            layers = e.layers[i]
            paths.append(
                {
                    "rank": i + 1,
                    "importance": importance,
                    "text": e.path_text(edges),
                    "edges": [
                        {
                            "from": names[s],
                            "to": names[d],
                            "relation": e.relation_names[rel % num_rel],
                            "inverse": rel >= num_rel,
                            "weight": w,
                            "layer": layer,
                        }
                        for (s, rel, d), w, layer in zip(edges, weights, layers, strict=True)
                    ],
                }
            )
        return {
            "head": f["head"],
            "relation": f["relation"],
            "tail": f["tail"],
            "score": e.score,
            "probability": float(torch.sigmoid(torch.tensor(e.score, dtype=torch.float64))),
            "paths": paths,
        }

    def health(self) -> dict[str, Any]:
        p = self.predictor
        return {
            "status": "ok",
            "entities": len(self.sorted_names),
            "relations": len(p.relations.names),
            "device": str(p.device),
            **self.counters,
        }
