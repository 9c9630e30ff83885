"""One direction of dependency (docs/design.md, "Layers"): read from the source with an AST walk.

* no library module imports an entry point (``cli.py``, ``train.py``, ``evaluate.py``,
  ``report.py`` or any ``__main__``);
* no module imports a layer above its own (the order of ``tests/_imports.py`` LAYERS, the
  table of docs/design.md);
* no import circles between files.
Each rule is also checked against a hand-made graph that breaks it, so the checks can fail.
"""

from __future__ import annotations

import re

import _imports as imp
import pytest


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
    assert "cmpnn_dist.model.build" in graph["cmpnn_dist.training.restore"]  # inside a function
    assert "cmpnn_dist.training.data" in graph["cmpnn_dist.training.trainer"]  # relative
    assert "cmpnn_dist.ops.reductions" in graph["cmpnn_dist.ops.triton_mp"]


def test_no_library_module_imports_an_entry_point():
    assert entry_point_imports(imp.imports()) == []
    bad = {**imp.imports(), "cmpnn_dist.predict.loading": frozenset({"cmpnn_dist.evaluate"})}
    assert entry_point_imports(bad) == ["cmpnn_dist.predict.loading -> cmpnn_dist.evaluate"]


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
