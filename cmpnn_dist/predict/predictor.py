"""Top-k link predictions by name from a trained C-MPNN.

A query ``(u, q, ?)`` is answered with one forward pass: the model scores every entity v as
``logit(v | u, q) = MLP([h^(T)_{v|u,q} || z_q])`` (paper section 4), and the candidates are
ranked by that logit.  Head prediction ``(?, q, v)`` is tail prediction with the inverse
relation ``(v, q + |R|, ?)``.  Candidates are restricted to the node types seen as the
relation's tails (heads, for the inverse) in the training facts, when the dataset is typed;
known facts (train / valid / test of the graph) are flagged, or filtered with
``known="filter"``.  Queries sharing ``(anchor, relation)`` share one forward pass; distinct
ones are batched ``batch_size`` at a time.  :meth:`Predictor.rank` is the one ranking (ids in,
tensors out; the tie rule in ``rank.py``: equal scores keep entity-id order) that
``predict_batch``, batch scoring and the server build their rows from.

    p = Predictor.from_checkpoint("storage/runs/<run>")
    p.predict(head="A::17", relation="t0", topk=5)          # pandas DataFrame
    p.predict(tail="C::3", relation="t0")                   # head prediction
    p.predict_batch(pd.DataFrame({"head": [...], "relation": [...], "tail": ["?", ...]}))
    p.rank(anchors, rels, k=10)                             # ids -> Ranking of tensors
    p.explain(head="A::17", relation="t0", tail="C::40", k=3)   # see explain.py
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from cmpnn_dist.errors import UsageError
from cmpnn_dist.evaluation.answers import AnswerIndex
from cmpnn_dist.predict.names import NameIndex, Query, queries_from
from cmpnn_dist.predict.rank import KNOWN_MODES, SPLITS, Ranking, rank_batch, ranking_frame


def _split_facts(gd: Any, split: str) -> Tensor:
    try:
        f = gd.facts(split)
    except (KeyError, FileNotFoundError):
        return torch.zeros(0, 3, dtype=torch.long)
    return torch.as_tensor(f, dtype=torch.long).reshape(-1, 3)


class Predictor:
    """Answers queries by name on one graph of a dataset with a trained model.

    Args:
        model: a :class:`~cmpnn_dist.model.CMPNN` (``model(graph, heads [B], rels [B]) ->
            logits [B, N]``); put in eval mode.
        dataset: the opened storage ``Dataset`` the model was trained on.
        graph: which graph of the dataset answers the queries (``"train"``; ``"test"`` is the
            unseen graph of an inductive dataset).
        batch_size: distinct queries per forward pass.
        device: where the model runs (default: the device of its parameters).
    """

    def __init__(
        self,
        model: nn.Module,
        dataset: Any,
        graph: str = "train",
        batch_size: int = 16,
        device: torch.device | str | None = None,
    ) -> None:
        if graph not in dataset.graph_names:
            raise UsageError(f"graph={graph!r}: dataset {dataset.name!r} has {dataset.graph_names}")
        if device is None:
            param = next(iter(model.parameters()), None)
            device = param.device if param is not None else torch.device("cpu")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.dataset = dataset
        self.graph_name = graph
        gd = dataset.graph_data(graph)
        self.graph = gd.graph().to(self.device)
        self.num_relations = int(dataset.num_relations)
        elsewhere = None
        if graph == "train" and "test" in dataset.graph_names and bool(dataset.inductive):
            test_names = set(dataset.graph_data("test").entity_names)
            elsewhere = (
                test_names,
                "it is an entity of the test graph of this inductive dataset, which the model "
                "was not trained on: add graph=test to answer on that graph",
            )
        self.entities = NameIndex(gd.entity_names, "entity", elsewhere)
        self.relations = NameIndex(dataset.relation_names, "relation")
        self.batch_size = max(1, int(batch_size))
        self.known_index = {s: AnswerIndex(_split_facts(gd, s), self.num_relations) for s in SPLITS}
        self.node_types: Tensor | None = gd.node_types
        self.allowed_types = self._relation_types(_split_facts(gd, "train"))

    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        overrides: Sequence[str] = (),
        weights: str | None = None,
        graph: str = "train",
        device: str | torch.device | None = None,
    ) -> Predictor:
        """Rebuild model and dataset from a checkpoint (or run) folder, as ``evaluate`` does.

        ``weights``: ``best`` (by validation MRR, when saved) or ``last``; None: a step
        folder's own weights, else best (as ``evaluate``); ``overrides``:
        ``key=value`` config overrides (``storage_root=...`` when the run moved).
        """
        from cmpnn_dist.runs.load import load_model

        overrides = list(overrides)
        if not any(o.split("=", 1)[0].lstrip("+") == "train.device" for o in overrides):
            # where it trained does not matter here (a CUDA run can predict on a laptop)
            kind = "auto" if device is None else str(device).split(":")[0]
            overrides.append(f"train.device={kind if kind in ('cpu', 'cuda') else 'auto'}")
        where = str(path) if "://" in str(path) else Path(path).expanduser()
        model, cfg, ds = load_model(where, overrides, weights)
        if device is None:
            use_cuda = torch.cuda.is_available() and cfg.train.device != "cpu"
            device = "cuda" if use_cuda else "cpu"
        return cls(model, ds, graph=graph, batch_size=cfg.eval.batch_size, device=device)

    # ------------------------------------------------------------------ candidates
    def _relation_types(self, train: Tensor) -> Tensor | None:
        """bool [2|R|, T]: node types of each relation's tails (inverse: heads) in training."""
        if self.node_types is None or train.numel() == 0:
            return None
        types = self.node_types.long()
        num_types = int(types.max()) + 1
        r = self.num_relations
        allowed = torch.zeros(2 * r, num_types, dtype=torch.bool)
        allowed[train[:, 1], types[train[:, 2]]] = True
        allowed[train[:, 1] + r, types[train[:, 0]]] = True
        seen = allowed.any(dim=1)
        allowed[~seen] = True  # a relation without training facts: every type
        return allowed

    def candidate_mask(self, anchors: Tensor, rels: Tensor, types: Tensor | None = None) -> Tensor:
        """bool [B, N]: the entities of the query relation's target types (all when untyped),
        and of node type ``types[b]`` when given (int64 [B]; -1: any type)."""
        n = self.graph.num_nodes
        if self.allowed_types is None:
            mask = torch.ones(anchors.numel(), n, dtype=torch.bool)
        else:
            mask = self.allowed_types[rels.cpu()][:, self.node_types.long()]
        if types is None or not bool((types >= 0).any()):
            return mask
        if self.node_types is None:
            raise UsageError("this graph has no node types: a node type cannot be asked for")
        types = types.cpu().long()[:, None]
        return mask & ((types < 0) | (self.node_types.long()[None, :] == types))

    def known_codes(self, anchors: Tensor, rels: Tensor) -> Tensor:
        """int8 [B, N]: 0 unknown, 1 + index in (train, valid, test) of the first split that
        holds the fact (anchor, rel, v) (inverse relations: the fact (v, rel - |R|, anchor))."""
        n = self.graph.num_nodes
        out = torch.zeros(anchors.numel(), n, dtype=torch.int8)
        for code in range(len(SPLITS), 0, -1):  # train wins: written last
            hit = self.known_index[SPLITS[code - 1]].mask(anchors, rels, n)
            out[hit] = code
        return out

    @torch.no_grad()
    def scores(self, anchors: Tensor, rels: Tensor) -> Tensor:
        """float [B, N] logits of every entity for queries (anchors[b], rels[b] in [0, 2|R|))."""
        out = []
        for s in range(0, anchors.numel(), self.batch_size):
            h = anchors[s : s + self.batch_size].to(self.device)
            r = rels[s : s + self.batch_size].to(self.device)
            out.append(self.model(self.graph, h, r).float().cpu())
        return torch.cat(out) if out else torch.zeros(0, self.graph.num_nodes)

    # ------------------------------------------------------------------ queries by name
    def resolve(self, q: Query) -> tuple[int, int, int | None]:
        """-> (anchor id, relation id in [0, 2|R|), given target id or None)."""
        rel = self.relations.id(q.relation, q.where)
        if q.head is not None:
            head = self.entities.id(q.head, q.where)
            tail = None if q.tail is None else self.entities.id(q.tail, q.where)
            return head, rel, tail
        if q.tail is None:
            raise UsageError(f"give head= or tail= {('(' + q.where + ')') if q.where else ''}")
        return self.entities.id(q.tail, q.where), rel + self.num_relations, None

    def predict(
        self,
        head: str | None = None,
        relation: str | None = None,
        tail: str | None = None,
        topk: int = 10,
        known: str = "flag",
        explain: int = 0,
    ) -> pd.DataFrame:
        """Top-``topk`` answers of ``(head, relation, ?)`` or ``(?, relation, tail)``; with
        both head and tail, the one row of that fact (its rank among the candidates).
        ``explain=K`` adds a ``paths`` column: the K most important paths of each row."""
        if relation is None:
            raise UsageError("give relation=")
        return self.predict_batch([Query(head, relation, tail)], topk, known, explain)

    def predict_batch(
        self,
        queries: pd.DataFrame | Iterable[Query],
        topk: int = 10,
        known: str = "flag",
        explain: int = 0,
    ) -> pd.DataFrame:
        """All queries at once: a DataFrame with columns ``head``, ``relation``, ``tail`` (``?``,
        empty or NaN marks the entity to predict) or a list of :class:`Query`.  Rows of the
        result carry ``query_id`` (position of the query); they are :meth:`rank`'s rows."""
        if known not in KNOWN_MODES:
            raise UsageError(f"known={known!r}: choose one of {list(KNOWN_MODES)}")
        if topk < 1:
            raise UsageError(f"topk must be >= 1, got {topk}")
        resolved = [self.resolve(q) for q in queries_from(queries)]
        ids = torch.tensor([(a, r, -1 if t is None else t) for a, r, t in resolved])
        anchors, rels, answers = ids.reshape(-1, 3).long().unbind(1)
        ranked = self.rank(anchors, rels, topk, known=known, answers=answers)
        frame = ranking_frame(ranked, anchors, rels, self.entities.names, self.relations.names)
        if explain > 0:
            frame["paths"] = [self.explain_row(r, explain).summary() for r in frame.itertuples()]
        return frame

    def rank(
        self,
        anchors: Tensor,
        rels: Tensor,
        k: int,
        candidates: Tensor | None = None,
        known: str = "flag",
        answers: Tensor | None = None,
    ) -> Ranking:
        """The top-``k`` candidates of each query ``(anchors[b], rels[b], ?)`` (head prediction:
        the inverse relation ``rels[b] + |R|``), ranked by ``logit(v | u_b, q_b)``.

        ``keep[b] = candidates[b]`` (and no known fact with ``known="filter"``); the order is
        descending score, equal scores in entity-id order (``rank.py``).  Queries sharing
        ``(anchor, relation)`` share one row of the forward pass; distinct ones are scored
        ``batch_size`` at a time.

        Args:
            anchors, rels: int64 [B]; rels in [0, 2|R|).
            k: rows per query, at most (>= 1); the result has K = min(k, N) slots.
            candidates: bool [B, N] typed candidates of each query (default
                :meth:`candidate_mask`: the relation's target types; AND a request's own
                type mask into it to narrow it).
            known: ``flag`` or ``filter``.
            answers: int64 [B]: -1 for a top-k query; v >= 0: the one row v with its rank
                among the candidates (``1 + #kept scoring higher``).
        Returns:
            a :class:`~cmpnn_dist.predict.rank.Ranking`: ids, scores, ranks, known codes
            [B, K] and counts [B].
        """
        return rank_batch(self, anchors, rels, k, candidates, known, answers)

    def row_query(self, row: Any) -> tuple[int, int, int]:
        """``(anchor, relation in [0, 2|R|), answer)`` of a result row, in the direction the
        prediction was made (head rows: the inverse relation from the tail)."""
        rel = self.relations.ids[row.relation]
        if row.target == "head":
            return int(row.tail_id), rel + self.num_relations, int(row.head_id)
        return int(row.head_id), rel, int(row.tail_id)

    def explain_row(self, row: Any, k: int = 5, beam: int = 10, wait: bool = True) -> Any:
        """The :class:`~cmpnn_dist.predict.explain.Explanation` of one result row."""
        return self.explain_ids(*self.row_query(row), k=k, beam=beam, wait=wait)

    # ------------------------------------------------------------------ explanations
    def explain(
        self,
        head: str,
        relation: str,
        tail: str,
        k: int = 5,
        beam: int = 10,
        target: str = "tail",
        wait: bool = True,
    ) -> Any:
        """The ``k`` most important paths explaining the fact ``(head, relation, tail)`` as the
        answer of ``(head, relation, ?)`` (``target="tail"``, paths from head to tail) or of
        ``(?, relation, tail)`` (``target="head"``, paths from tail to head through the
        inverse relation): an :class:`~cmpnn_dist.predict.explain.Explanation`.
        ``beam``: partial paths kept per search state; ``wait=False``: NBFNet's layering
        (the l-th edge at layer l - 1) instead of any increasing layers."""
        if target not in ("tail", "head"):
            raise UsageError(f"target={target!r}: choose tail or head")
        h, r, t = self.resolve(Query(head, relation, tail))
        assert t is not None
        if target == "head":
            return self.explain_ids(t, r + self.num_relations, h, k, beam, wait)
        return self.explain_ids(h, r, t, k, beam, wait)

    def explain_ids(
        self,
        anchor: int,
        relation: int,
        answer: int,
        k: int = 5,
        beam: int = 10,
        wait: bool = True,
    ) -> Any:
        """:meth:`explain` by ids: the answer ``answer`` of ``(anchor, relation, ?)``,
        ``relation`` in [0, 2|R|)."""
        from cmpnn_dist.predict.explain import explain_fact

        return explain_fact(self, anchor, relation, answer, k=k, beam=beam, wait=wait)
