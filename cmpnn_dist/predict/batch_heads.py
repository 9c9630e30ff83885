"""Which heads a batch-scoring job asks about: ``heads=all | type:TYPE | file:PATH``.

* ``all``: every entity that can be a head of the relation -- the entities of the node types
  its heads have in the training facts (every entity when the dataset has no node types, or
  the relation has no training fact), as :class:`~cmpnn_dist.predict.Predictor` restricts the
  candidates of the inverse relation;
* ``type:TYPE``: every entity of node type TYPE;
* ``file:PATH``: the names in a text file, one a line (blank lines and ``#`` comments
  skipped); an unknown name is one error naming ``PATH:LINE`` and the closest names.

Heads are in entity-id order (``all``, ``type:``) or file order; a name repeated in the file
is asked once (its first line).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import numpy as np

from cmpnn_dist.errors import UsageError
from cmpnn_dist.predict.names import NameIndex


def relation_head_types(gd: Any, relation: int) -> np.ndarray | None:
    """The node type ids of ``relation``'s heads in the training facts; None: every entity."""
    if gd.node_types is None:
        return None
    try:
        train = np.asarray(gd.facts("train")).reshape(-1, 3)
    except (KeyError, FileNotFoundError):
        return None
    heads = train[train[:, 1] == relation, 0]
    if heads.size == 0:
        return None
    return np.unique(np.asarray(gd.node_types)[heads])


def select_heads(spec: str, gd: Any, entities: NameIndex, relation: int) -> list[int]:
    """Head entity ids for ``heads=spec`` on graph data ``gd`` (see the module docstring)."""
    kind, sep, arg = spec.partition(":")
    num = len(entities)
    if spec == "all":
        types = relation_head_types(gd, relation)
        if types is None:
            return list(range(num))
        return np.flatnonzero(np.isin(np.asarray(gd.node_types), types)).tolist()
    if kind == "type" and sep:
        names = list(getattr(gd, "node_type_names", []) or [])
        if gd.node_types is None or not names:
            raise UsageError(f"heads={spec}: this dataset has no node types")
        if arg not in names:
            close = difflib.get_close_matches(arg, names, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else f"; types: {', '.join(names)}"
            raise UsageError(f"heads={spec}: unknown node type {arg!r}{hint}")
        return np.flatnonzero(np.asarray(gd.node_types) == names.index(arg)).tolist()
    if kind == "file" and sep:
        return read_heads(Path(arg).expanduser(), entities)
    raise UsageError(f"heads={spec!r}: use heads=all, heads=type:TYPE or heads=file:PATH")


def read_heads(path: Path, entities: NameIndex) -> list[int]:
    """Entity ids of the names in ``path``, one a line, in order, each once."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"heads=file:{path}: cannot read it ({exc.strerror or exc})") from None
    seen: dict[int, None] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if "\t" in name:
            raise UsageError(f"{path}:{lineno}: expected one entity name a line, got a tab")
        seen.setdefault(entities.id(name, f"{path}:{lineno}"), None)
    if not seen:
        raise UsageError(f"heads=file:{path}: no entity names in the file")
    return list(seen)
