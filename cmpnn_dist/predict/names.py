"""Names in, ids out: entity / relation lookup with suggestions, and the query TSV reader.

An unknown name is a :class:`~cmpnn_dist.errors.UsageError` naming where it came from and the
closest known names (``difflib``), so a typo costs one readable line, never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cmpnn_dist.errors import UsageError

UNKNOWN = ("?", "")


class NameIndex:
    """Bidirectional name <-> id map for ``kind`` ("entity" or "relation")."""

    def __init__(
        self, names: list[str], kind: str, elsewhere: tuple[set[str], str] | None = None
    ) -> None:
        self.names = list(names)
        self.kind = kind
        # (names of another graph, what to say when a name is there): an inductive dataset's
        # test entities asked on the training graph
        self.elsewhere = elsewhere
        self.ids: dict[str, int] = {}
        for i, name in enumerate(self.names):
            self.ids.setdefault(name, i)

    def __len__(self) -> int:
        return len(self.names)

    def id(self, name: str, where: str = "") -> int:
        """The id of ``name``; UsageError with the closest names when unknown."""
        found = self.ids.get(name)
        if found is not None:
            return found
        at = f" ({where})" if where else ""
        if self.elsewhere is not None and name in self.elsewhere[0]:
            raise UsageError(f"unknown {self.kind} {name!r}{at}; {self.elsewhere[1]}")
        close = difflib.get_close_matches(name, self.names, n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise UsageError(f"unknown {self.kind} {name!r}{at}{hint}")


@dataclass(frozen=True)
class Query:
    """One query by name: exactly one of ``head`` / ``tail`` is None (the one to predict), or
    neither (score / explain that fact).  ``where`` names its origin for error messages."""

    head: str | None
    relation: str
    tail: str | None
    where: str = ""


def read_queries(path: Path) -> list[Query]:
    """Queries from a TSV file: ``head<TAB>relation[<TAB>tail]`` per line, ``?`` (or an empty
    field, or a missing third column) marks the entity to predict.  A first line
    ``head<TAB>relation<TAB>tail`` is a header; blank lines and ``#`` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read queries file {path}: {exc.strerror or exc}") from exc
    out: list[Query] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.rstrip("\r\n").split("\t")]
        if (
            lineno == 1
            and [f.lower() for f in fields[:3]] == ["head", "relation", "tail"][: len(fields)]
        ):
            continue
        where = f"{path}:{lineno}"
        if len(fields) not in (2, 3):
            raise UsageError(
                f"{where}: expected head<TAB>relation[<TAB>tail], got {len(fields)} fields"
            )
        head, relation = fields[0], fields[1]
        tail = fields[2] if len(fields) == 3 else "?"
        if relation in UNKNOWN:
            raise UsageError(f"{where}: the relation is missing")
        if head in UNKNOWN and tail in UNKNOWN:
            raise UsageError(f"{where}: give the head or the tail (both are '?')")
        out.append(
            Query(
                None if head in UNKNOWN else head,
                relation,
                None if tail in UNKNOWN else tail,
                where,
            )
        )
    if not out:
        raise UsageError(f"{path}: no queries in the file")
    return out


def queries_from(queries: pd.DataFrame | Iterable[Query]) -> list[Query]:
    """A list of :class:`Query` from a list, or from a DataFrame with columns ``head``,
    ``relation`` and optionally ``tail`` (``?``, empty or NaN: the entity to predict)."""
    if not isinstance(queries, pd.DataFrame):
        return list(queries)
    missing = [c for c in ("head", "relation") if c not in queries.columns]
    if missing:
        raise UsageError(f"queries table lacks column(s) {missing}; needs head, relation[, tail]")

    def name(x: Any) -> str | None:
        if x is None or (isinstance(x, float) and np.isnan(x)):
            return None
        s = str(x).strip()
        return None if s in ("", "?") else s

    tails = queries["tail"] if "tail" in queries.columns else [None] * len(queries)
    out = []
    for i, (h, r, t) in enumerate(zip(queries["head"], queries["relation"], tails, strict=True)):
        rel = name(r)
        if rel is None:
            raise UsageError(f"queries row {i}: the relation is missing")
        out.append(Query(name(h), rel, name(t), f"row {i}"))
    return out
