"""Which dotted keys the config schema declares, and the check of an override's key.

A key is declared when each of its parts names a field of the dataclass above it in
:class:`~cmpnn_dist.config.schema.Config` (``train.lr``, ``model.prune.gate``), or when it lies
inside a declared open map, a field whose value is a ``dict`` (``data.synthetic.num_entities``:
the synthetic generators' own parameters, checked by the generators).  Hydra's ``+key=value``
(append) and ``++key=value`` (force-append) would otherwise add a key the schema does not
declare, which the typed config then drops without a word; :func:`check_override_keys`
refuses such a key in one line, with or without the prefix.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from cmpnn_dist.config.schema import Config
from cmpnn_dist.errors import UsageError


def declared(key: str, root: Any = None) -> bool:
    """True when dotted ``key`` is a field of the schema (``root``: a ``Config`` instance, by
    default the defaults) or lies inside one of its open maps."""
    node: Any = Config() if root is None else root
    for part in key.split("."):
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            names = {f.name for f in dataclasses.fields(node)}
            if part not in names:
                return False
            node = getattr(node, part)
        elif isinstance(node, dict):
            return True  # an open map: its entries are the map owner's to check
        elif isinstance(node, list):
            return part.isdigit()  # an item of a list field (eval.splits.0)
        else:
            return False  # below a leaf value
    return True


def schema_keys(root: Any = None) -> list[str]:
    """Every declared leaf key (``train.lr``, ``data.synthetic``...), in schema order."""
    out: list[str] = []

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out.append(prefix + f.name)

    walk(Config() if root is None else root, "")
    return out


def override_key(override: str) -> str:
    """The dotted key of a ``key=value`` override, without Hydra's ``+`` / ``++`` / ``~``
    prefix and ``@package`` suffix."""
    key = override.split("=", 1)[0].strip()
    return key.lstrip("+~").split("@", 1)[0]


def check_override_keys(overrides: Iterable[str], names: Iterable[str] = ()) -> None:
    """Refuse (UsageError, one line) the first override whose key the schema does not declare,
    with the closest declared key or command option (``names``: the command's own
    ``name=value`` options, ``topk`` of predict) as a "did you mean" hint.

    A config group choice (``model=pna``) names a field of the schema, so it passes; the
    option itself is Hydra's to check.  Keys under ``hydra.`` and ``hydra/`` are Hydra's own."""
    for override in overrides:
        key = override_key(override)
        if not key or key == "hydra" or key.startswith(("hydra.", "hydra/")) or declared(key):
            continue
        close = difflib.get_close_matches(key, [*names, *schema_keys()], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(
            f"{override}: {key} is not a config key{hint} (keys and open maps such as "
            "data.synthetic are listed by --help; a + prefix cannot add a new key)"
        )
