"""The package's import graph, read from the source (AST), and its documented layer order.

``imports()`` maps every module of ``cmpnn_dist`` to the ``cmpnn_dist`` modules it imports,
at module level or inside a function (a lazy import is still a dependency).  ``from pkg
import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg`` itself.
Importing ``a.b`` also runs ``a/__init__.py``; that implicit edge is not counted (every
submodule would otherwise "import" its package).

``LAYERS`` is the order of ``docs/design.md``, lowest first: a module may import its own layer
and the ones below it; entry points (``cmpnn_dist.cli`` and the ``-m`` aliases) may import
anything and are imported by no library module.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.helpers.paths import REPO_ROOT as ROOT

PACKAGE = "cmpnn_dist"

# (layer name, module prefixes): the first matching prefix decides; order = layer order
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "cmpnn_dist.errors", "cmpnn_dist.config", "cmpnn_dist.graph", "cmpnn_dist.arrays",
            "cmpnn_dist.openmp_env", "cmpnn_dist.paper", "cmpnn_dist.lazy",
        ),
    ),
    ("storage", ("cmpnn_dist.storage",)),
    ("convert", ("cmpnn_dist.convert",)),
    ("ops", ("cmpnn_dist.ops",)),
    ("model", ("cmpnn_dist.model",)),
    ("evaluation", ("cmpnn_dist.evaluation",)),
    ("runs", ("cmpnn_dist.runs",)),
    ("training", ("cmpnn_dist.training",)),
    ("distributed", ("cmpnn_dist.distributed",)),
    ("applications", ("cmpnn_dist.predict", "cmpnn_dist.wl", "cmpnn_dist.serve")),
]  # fmt: skip
# the commands (``cmpnn_dist.cli`` and its modules) and their ``-m`` aliases (besides every
# ``__main__``): four-line modules that import ``main`` from ``cmpnn_dist.cli``
COMMANDS = "cmpnn_dist.cli"
ALIASES = (
    "cmpnn_dist.train", "cmpnn_dist.evaluate", "cmpnn_dist.report", "cmpnn_dist.sweep",
    "cmpnn_dist.predict.batch",
)  # fmt: skip


@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _owner(name: str) -> str | None:
    """The longest known module that ``name`` is, or is inside."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports() -> dict[str, frozenset[str]]:
    """Module -> the package modules it imports (module level and inside functions)."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = name if is_pkg else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(_owner(a.name) or "" for a in node.names if _ours(a.name))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}" if base else up
                if not _ours(base):
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.add(sub if sub in mods else _owner(base) or "")
        found.discard("")
        found.discard(name)
        graph[name] = frozenset(found)
    return graph


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def is_alias(name: str) -> bool:
    """A ``python -m`` name of a command: ``ALIASES`` and every ``__main__``."""
    return name in ALIASES or name.endswith(".__main__")


def is_entry_point(name: str) -> bool:
    return name == COMMANDS or name.startswith(COMMANDS + ".") or is_alias(name)


def layer(name: str) -> int:
    """Index of the layer of module ``name`` in :data:`LAYERS` (entry points: above all)."""
    if is_entry_point(name):
        return len(LAYERS)
    if name == PACKAGE:
        return 0
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    raise KeyError(
        f"{name} is in no layer of tests/helpers/imports.py LAYERS (add it, and to design.md)"
    )


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (import circles), sorted."""
    graph = imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph has ~130 nodes, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)
