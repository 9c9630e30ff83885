"""One direction of dependency (docs/design.md, "Layers"): read from the source with an AST walk.

* no library module imports an entry point (``cmpnn_dist.cli`` and its commands, or a ``-m``
  alias such as ``cmpnn_dist/train.py`` or a ``__main__``);
* no module imports a layer above its own (the order of ``tests/helpers/imports.py`` LAYERS, the
  table of docs/design.md);
* no import circles between files;
* every command lives in ``cmpnn_dist/cli/`` behind a four-line alias, no two sibling modules
  differ only by a suffix, and loading a model reaches no training code.
Each rule is also checked against a hand-made graph that breaks it, so the checks can fail.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import imports as imp


def entry_point_imports(graph: dict[str, frozenset[str]]) -> list[str]:
    return sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if not imp.is_entry_point(m)
        for d in deps
        if imp.is_entry_point(d)
    )


def climbs(graph: dict[str, frozenset[str]]) -> list[str]:
    return sorted(
        f"{m} ({imp.LAYERS[imp.layer(m)][0]}) -> {d} ({imp.LAYERS[imp.layer(d)][0]})"
        for m, deps in graph.items()
        if not imp.is_entry_point(m)
        for d in deps
        if not imp.is_entry_point(d) and imp.layer(d) > imp.layer(m)
    )


@pytest.mark.triton
def test_the_walk_sees_known_imports():
    graph = imp.imports()
    assert "cmpnn_dist.errors" in graph["cmpnn_dist.config.validation"]  # module level
    assert "cmpnn_dist.model.build" in graph["cmpnn_dist.runs.restore"]  # inside a function
    assert "cmpnn_dist.training.data" in graph["cmpnn_dist.training.trainer"]  # relative
    assert "cmpnn_dist.ops.reductions" in graph["cmpnn_dist.ops.triton_mp"]


def test_no_library_module_imports_an_entry_point():
    assert entry_point_imports(imp.imports()) == []
    bad = {**imp.imports(), "cmpnn_dist.runs.load": frozenset({"cmpnn_dist.evaluate"})}
    assert entry_point_imports(bad) == ["cmpnn_dist.runs.load -> cmpnn_dist.evaluate"]


def test_every_module_is_in_a_layer_and_none_climbs():
    for name in imp.modules():
        imp.layer(name)  # KeyError naming the module when it is in no layer
    assert climbs(imp.imports()) == []
    bad = {**imp.imports(), "cmpnn_dist.config": frozenset({"cmpnn_dist.model.messages"})}
    assert climbs(bad) == ["cmpnn_dist.config (base) -> cmpnn_dist.model.messages (model)"]


def test_no_import_circles(monkeypatch):
    assert imp.cycles() == []
    circle = {**imp.imports(), "cmpnn_dist.graph": frozenset({"cmpnn_dist.storage.csr"})}
    monkeypatch.setattr(imp, "imports", lambda: circle)
    assert imp.cycles() == [["cmpnn_dist.graph", "cmpnn_dist.storage.csr"]]


def test_design_doc_lists_the_layers_in_this_order():
    """The layer table of docs/design.md names the same layers, in the same order."""
    text = (imp.ROOT / "docs" / "design.md").read_text()
    table = text.split("Layers (", 1)[1].split("| layer |", 1)[1].split("\n\n", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ")]
    names = [re.match(r"\| ([a-z]+)", r).group(1) for r in rows]
    assert names == [name for name, _ in imp.LAYERS] + ["entry"]


@pytest.mark.parametrize("name", ["cmpnn_dist.predict.__main__", "cmpnn_dist.cli"])
def test_entry_points_sit_above_every_layer(name):
    assert imp.is_entry_point(name) and imp.layer(name) == len(imp.LAYERS)


def _alias_target(path) -> str | None:
    """The ``cmpnn_dist.cli`` module an alias file imports ``main`` from, when the file is
    exactly an alias: a docstring, ``from cmpnn_dist.cli.X import main`` and
    ``if __name__ == "__main__": raise SystemExit(main())``; else None."""
    import ast

    body = ast.parse(path.read_text()).body
    if len(body) != 3 or not isinstance(body[0], ast.Expr):
        return None
    imp_, guard = body[1], body[2]
    if not (
        isinstance(imp_, ast.ImportFrom)
        and (imp_.module or "").startswith(imp.COMMANDS + ".")
        and [a.name for a in imp_.names] == ["main"]
    ):
        return None
    if ast.unparse(guard) != "if __name__ == '__main__':\n    raise SystemExit(main())":
        return None
    return imp_.module


def test_every_command_lives_in_cli_behind_a_four_line_alias():
    """One form for every entry point: the command in ``cmpnn_dist/cli/<name>.py`` (its
    ``main``), its ``python -m`` name an alias that holds nothing else; no other module of the
    package has a ``__main__`` block (a library module is never a command)."""
    mods = imp.modules()
    aliases = {m: _alias_target(p) for m, p in mods.items() if imp.is_alias(m)}
    assert [m for m, target in aliases.items() if target is None] == []
    commands = {
        m for m in mods if m.startswith(imp.COMMANDS + ".") and m.rsplit(".", 1)[1] not in
        ("common", "reaper")  # the plumbing; the reaper is started by the driver, not by users
    }  # fmt: skip
    assert sorted(aliases.values()) == sorted(commands)  # one alias per command
    blocks = [
        m for m, p in mods.items()
        if not imp.is_entry_point(m) and '__name__ == "__main__"' in p.read_text()
    ]  # fmt: skip
    assert blocks == []
    bad = imp.ROOT / "cmpnn_dist" / "train.py"
    assert _alias_target(bad) == "cmpnn_dist.cli.train"


SUFFIXES = ("s", "es", "ing", "ion", "ation", "er", "or", "ed")


def near_names(modules) -> list[str]:
    """Sibling library modules whose names differ only by a suffix (``source`` beside
    ``sources``): what a newcomer cannot tell apart.  Commands and aliases do not count (their
    names are what users type)."""
    by_parent: dict[str, set[str]] = {}
    for m in modules:
        if not imp.is_entry_point(m) and "." in m:
            parent, name = m.rsplit(".", 1)
            by_parent.setdefault(parent, set()).add(name)
    return sorted(
        f"{parent}.{a} ~ {parent}.{b}"
        for parent, names in by_parent.items() for a in names for b in names
        if a != b and b.startswith(a) and b[len(a):] in SUFFIXES
    )  # fmt: skip


def test_no_two_sibling_modules_differ_only_by_a_suffix():
    assert near_names(imp.modules()) == []
    assert near_names(["cmpnn_dist.convert.source", "cmpnn_dist.convert.sources"]) == [
        "cmpnn_dist.convert.source ~ cmpnn_dist.convert.sources"
    ]


def closure(graph: dict[str, frozenset[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (lazy imports included)."""
    seen, todo = set(), [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


# what loading a model may not reach: the training loop and the Ray Train side
TRAINING_CODE = ("cmpnn_dist.training", "cmpnn_dist.distributed.driver",
                 "cmpnn_dist.distributed.worker", "cmpnn_dist.distributed.context")  # fmt: skip


@pytest.mark.parametrize(
    "start", ["cmpnn_dist.runs.load", "cmpnn_dist.predict.predictor", "cmpnn_dist.serve.engine"]
)
def test_loading_a_model_reaches_no_training_code(start):
    """Prediction and serving read checkpoints through ``runs``: no import path, lazy ones
    included, from their model loading leads into ``training`` or Ray Train's driver."""
    graph = imp.imports()
    assert sorted(m for m in closure(graph, start) if m.startswith(TRAINING_CODE)) == []
    bad = {
        **graph,
        "cmpnn_dist.runs.load": graph["cmpnn_dist.runs.load"] | {"cmpnn_dist.training.loop"},
    }
    assert "cmpnn_dist.training.loop" in closure(bad, "cmpnn_dist.predict.predictor")


@pytest.mark.integration
def test_a_loaded_model_brought_in_no_training_module(real_run):
    """The same, at run time: after ``Predictor.from_checkpoint`` on a real run (a fresh
    process), ``sys.modules`` holds no training or Ray Train driver module."""
    code = (
        "import sys\n"
        "from cmpnn_dist.predict.predictor import Predictor\n"
        f"p = Predictor.from_checkpoint({real_run['run_dir']!r})\n"
        "names = p.dataset.graph_data('train').entity_names\n"
        "rel = p.dataset.relation_names[0]\n"
        "assert len(p.predict(head=names[0], relation=rel, topk=2)) == 2\n"
        f"bad = [m for m in sys.modules if m.startswith({TRAINING_CODE!r})]\n"
        "assert bad == [], bad\n"
        "assert 'ray.train' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=imp.ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_config_registries_find_their_plugins_by_name_not_by_import():
    """The schema's registries load the packages that register into them by dotted name
    (``importlib``, plugin discovery), so the base layer imports none of them; each named
    package exists and sits in a layer above the config's."""
    from cmpnn_dist.config import CHECK_PLUGINS, CHOICE_PLUGINS

    graph = imp.imports()
    named = {m for mods in CHOICE_PLUGINS.values() for m in mods} | set(CHECK_PLUGINS)
    for name in sorted(named):
        assert name in imp.modules(), name
        assert imp.layer(name) > imp.layer("cmpnn_dist.config"), name
        assert all(name not in graph[m] for m in graph if m.startswith("cmpnn_dist.config")), name


WATCH_TORCH = """
import importlib.abc, os, runpy, sys
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
            sys.stderr.write("torch imported before the OpenMP defaults\\n")
            os._exit(3)
        return None
sys.meta_path.insert(0, Watch())
sys.argv = [sys.argv[1], "--help"]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.integration
@pytest.mark.parametrize("alias", sorted(m.removesuffix(".__main__") for m in imp.modules()
                                         if imp.is_alias(m)))  # fmt: skip
def test_every_command_sets_the_openmp_defaults_before_torch_loads(alias):
    """``python -m <alias> --help`` in a fresh process: torch is first imported after the CLI
    has set ``OMP_WAIT_POLICY`` (libgomp reads it once, at load; ``cmpnn_dist.openmp_env``), so
    a package's ``__init__`` on the way to the command imports no torch."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-c", WATCH_TORCH, alias], cwd=imp.ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, (alias, proc.stderr[-2000:])
