"""The suite's tiers (docs/testing.md) are declared where CI can see them.

CI installs Triton and runs only the tests marked ``triton`` a second time, so a test whose
behaviour depends on Triton being importable must carry that marker: one that names Triton
(``importorskip("triton")``, ``find_spec("triton")``, the ``triton_*`` modules) or the ``fused``
implementation, itself or through a module-level name built from such code (a parameter
list).  The oracle is each test file's own source, read with ``ast``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"
TRITON = re.compile(r"triton|Triton|[\"']fused[\"']|impl=fused")


def _marks(decorators: list[ast.expr], name: str) -> bool:
    return any(name in ast.unparse(d) for d in decorators)


def triton_tests_without_the_marker(path: Path) -> list[str]:
    """The test functions of ``path`` that touch the Triton path but lack ``triton``."""
    source = path.read_text()
    tree = ast.parse(source)
    module_marked = any(
        isinstance(s, ast.Assign)
        and any(getattr(t, "id", None) == "pytestmark" for t in s.targets)
        and "triton" in ast.unparse(s.value)
        for s in tree.body
    )
    touching_names: set[str] = set()
    whole_module = False
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) or not TRITON.search(
            ast.unparse(stmt)
        ):
            continue
        if "importorskip" in ast.unparse(stmt):
            whole_module = True
        for node in ast.walk(stmt):  # names assigned or appended to by that statement
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                touching_names.add(node.id)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "extend", "insert", "add", "update")
                and isinstance(node.func.value, ast.Name)
            ):  # a module-level list or set grown there
                touching_names.add(node.func.value.id)
    missing = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_"):
            continue
        text = ast.unparse(fn)
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        touches = whole_module or TRITON.search(text) or used & touching_names
        if touches and not module_marked and not _marks(fn.decorator_list, "triton"):
            missing.append(f"{path.name}::{fn.name}")
    return missing


def test_every_test_touching_the_triton_path_is_marked_triton():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50
    missing = [m for f in files if f.name != Path(__file__).name for m in
               triton_tests_without_the_marker(f)]  # fmt: skip
    assert not missing, f"mark @pytest.mark.triton (the Triton pass runs only those): {missing}"


def test_the_checker_sees_a_test_that_touches_triton(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import importlib.util\nimport pytest\n"
        "CASES = []\nif importlib.util.find_spec('triton') is None:\n    CASES.append(1)\n"
        "def test_a(): pytest.importorskip('triton')\n"
        "@pytest.mark.parametrize('c', CASES)\ndef test_b(c): pass\n"
        "@pytest.mark.triton\ndef test_c(): pytest.importorskip('triton')\n"
        "def test_d(): pass\n"
    )
    want = ["test_probe.py::test_a", "test_probe.py::test_b"]
    assert triton_tests_without_the_marker(probe) == want


def test_every_marker_is_declared():
    """``--strict-markers`` would refuse an undeclared one; the tiers' markers are declared."""
    text = (TESTS.parent / "pyproject.toml").read_text()
    block = re.search(r"^markers = \[(.*?)^\]", text, re.S | re.M).group(1)
    names = set(re.findall(r'^\s*"(\w+):', block, re.M))
    assert {"slow", "integration", "gpu", "triton"} <= names
