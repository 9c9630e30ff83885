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
import subprocess
import sys

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
    assert "cmpnn_dist.errors" in graph["cmpnn_dist.config"]  # module level
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


@pytest.mark.integration
def test_validate_runs_without_the_model_and_the_cli_still_applies_message_rules():
    """``config.validate`` imports no model code (the schema knows no registry); the message
    registry's own rule (rotate needs an even hidden_dim) still reaches the CLI, registered."""
    code = (
        "import sys\n"
        "from cmpnn_dist.config import Config, validate\n"
        "cfg = Config(); cfg.model.message = 'rotate'; cfg.model.hidden_dim = 31\n"
        "validate(cfg)  # no registry loaded: only the schema's own checks\n"
        "assert not [m for m in sys.modules if m.startswith('cmpnn_dist.model')], 'model'\n"
        "assert 'torch' not in sys.modules, 'torch'\n"
        "from cmpnn_dist.cli import compose_config\n"
        "from cmpnn_dist.errors import UsageError\n"
        "try:\n"
        "    compose_config('default', ['model.message=rotate', 'model.hidden_dim=31'])\n"
        "except UsageError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=imp.ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "model.message=rotate needs an even model.hidden_dim" in proc.stdout
