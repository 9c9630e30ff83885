"""Names in, ids out: entity / relation lookup with suggestions, and the query TSV reader.

An unknown name is a :class:`~cmpnn_dist.cli.UsageError` naming where it came from and the
closest known names (``difflib``), so a typo costs one readable line, never a traceback.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from cmpnn_dist.cli import UsageError

UNKNOWN = ("?", "")


class NameIndex:
    """Bidirectional name <-> id map for ``kind`` ("entity" or "relation")."""

    def __init__(self, names: list[str], kind: str) -> None:
        self.names = list(names)
        self.kind = kind
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
        close = difflib.get_close_matches(name, self.names, n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        at = f" ({where})" if where else ""
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
