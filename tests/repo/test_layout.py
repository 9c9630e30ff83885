"""The tests' layout (docs/testing.md, "Layout"): unit tests in folders that mirror the
packages of ``cmpnn_dist/``, shared code in ``tests/helpers/`` and nowhere else, no edits of
``sys.path``, and nothing imported from ``benchmarks/`` (the harness's own tests live with it, in
``benchmarks/tests/``).  Each rule is an AST walk of every file under ``tests/`` (strings, such
as the scripts a test starts, aside), and each is shown to catch a file that breaks it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"
TOP_FOLDERS = {"unit", "integration", "repo", "helpers", "fixtures"}


def packages() -> set[str]:
    root = REPO_ROOT / "cmpnn_dist"
    return {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}


def imported(tree: ast.AST) -> list[str]:
    """Every module an import statement names (relative imports have no level here)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


def edits_sys_path(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if ast.unparse(node.func.value) == "sys.path":
                return True
    return False


def violations(path: Path, tests: Path = TESTS) -> list[str]:
    """What is wrong with ``path`` (a .py file under ``tests``), in words."""
    rel = path.relative_to(tests)
    out = []
    if len(rel.parts) > 1 and rel.parts[0] not in TOP_FOLDERS:
        out.append(f"{rel}: tests live under {sorted(TOP_FOLDERS)}")
    if rel.parts[0] == "unit" and len(rel.parts) > 2 and rel.parts[1] not in packages():
        out.append(f"{rel}: unit/{rel.parts[1]} mirrors no package of cmpnn_dist/")
    if rel.parts[0] == "fixtures":
        return out  # data written by other versions of the code and by upstream tools
    tree = ast.parse(path.read_text(), filename=str(path))
    if edits_sys_path(tree):
        out.append(f"{rel}: edits sys.path (import tests.helpers.<name> instead)")
    for name in imported(tree):
        top = name.split(".")
        if top[0] == "tests" and len(top) > 1 and top[1] not in ("helpers",):
            out.append(f"{rel}: imports the test module {name} (share it through tests.helpers)")
        if top[0] == "benchmarks":
            out.append(f"{rel}: imports {name} from benchmarks/ (the library or tests.helpers)")
    return out


def test_every_test_file_keeps_the_layout():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100
    assert not [v for f in files for v in violations(f)]


def test_every_unit_folder_mirrors_a_package():
    folders = {p.name for p in (TESTS / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages() and len(folders) >= 10


def test_the_rules_catch_files_that_break_them(tmp_path):
    tests = tmp_path / "tests"
    cases = {
        "unit/trainingz/test_a.py": "x = 1\n",
        "unit/model/test_b.py": "import sys\nsys.path.insert(0, 'tests')\n",
        "unit/model/test_c.py": "from tests.unit.ops.test_ops_reference import hub_graph\n",
        "integration/test_d.py": "def f():\n    from benchmarks.accuracy.paper_tables import T\n",
        "loose/test_e.py": "x = 1\n",
        "unit/model/test_ok.py": "from tests.helpers import pruned\ns = 'sys.path.insert(0, x)'\n",
        "unit/model/test_f.py": "import benchmarks.harness.timing\n",
    }
    for rel, text in cases.items():
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text(text)
    found = {rel: violations(tests / rel, tests) for rel in cases}
    assert "mirrors no package" in found["unit/trainingz/test_a.py"][0]
    assert "edits sys.path" in found["unit/model/test_b.py"][0]
    assert "imports the test module" in found["unit/model/test_c.py"][0]
    assert "from benchmarks/" in found["integration/test_d.py"][0]
    assert "from benchmarks/" in found["unit/model/test_f.py"][0]
    assert "tests live under" in found["loose/test_e.py"][0]
    assert found["unit/model/test_ok.py"] == []
