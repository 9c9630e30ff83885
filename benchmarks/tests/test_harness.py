"""The harness every suite shares (``benchmarks/harness/``): where results go, how rounds
interleave, how a script names itself, and the suites' registry against the files on disk."""

from __future__ import annotations

import ast
import json
import statistics

import pytest

from benchmarks.harness import provenance, results, suites, timing
from tests.helpers.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"


def test_a_script_writes_under_its_suites_results_folder():
    assert results.results_dir(BENCH / "ops" / "cpu_kernel.py") == BENCH / "results" / "ops"
    assert results.results_dir("pruned") == BENCH / "results" / "pruned"
    assert provenance.module_of(BENCH / "ops" / "cpu_kernel.py") == "benchmarks.ops.cpu_kernel"


def test_results_are_written_whole(tmp_path):
    results.save_results(tmp_path / "out", "x", {"a": 1}, "# x\n")
    assert json.loads((tmp_path / "out" / "x.json").read_text()) == {"a": 1}
    assert (tmp_path / "out" / "x.md").read_text() == "# x\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x.json", "x.md"]


def test_interleaved_rounds_rotate_who_goes_first():
    order: list[str] = []

    def case(name: str):
        return lambda: order.append(name) or len(order)

    got = timing.interleaved({"a": case("a"), "b": case("b"), "c": case("c")}, rounds=3)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert got == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}
    assert timing.medians(got) == {k: statistics.median(v) for k, v in got.items()}
    order.clear()
    timing.interleaved({"a": case("a"), "b": case("b")}, rounds=2, rotate=False)
    assert order == ["a", "b", "a", "b"]


def test_every_script_belongs_to_a_suite_and_every_target_to_a_script():
    for suite in (*suites.SUITES, suites.STUDIES):
        folder = BENCH / suite
        declared = {t.module for t in suites.targets(suite)}
        on_disk = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
        assert declared <= on_disk, (suite, declared - on_disk)
        # a script with a main of its own is a target; the rest are its suite's modules
        mains = {
            p.stem
            for p in folder.glob("*.py")
            if '__name__ == "__main__"' in p.read_text() and p.stem != "__init__"
        }
        assert mains <= declared, (suite, mains - declared)
    folders = {p.name for p in BENCH.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {*suites.SUITES, suites.STUDIES, "harness", "tests"}
    assert not list(BENCH.glob("*.sh")) and {p.name for p in BENCH.glob("*.py")} == {
        "__init__.py",
        "__main__.py",
    }


def test_quick_runs_write_to_scratch_never_over_a_figure():
    for suite in suites.SUITES:
        for t in suites.targets(suite):
            if t.quick is None:
                continue
            outs = [t.quick[i + 1] for i, a in enumerate(t.quick) if a in ("--out", "--workdir")]
            writes = "--print" in t.quick or t.module in ("house",)
            assert writes or (outs and all(o.startswith("{tmp}") for o in outs)), t


def test_no_benchmark_edits_sys_path():
    for path in BENCH.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert ast.unparse(node.func.value) != "sys.path", path


def test_an_unknown_suite_is_named():
    with pytest.raises(KeyError, match="no suite 'opz'"):
        suites.targets("opz")


def test_an_archive_packs_to_the_same_bytes_and_unpacks_to_the_same_files(tmp_path):
    from benchmarks.harness import archive

    cells = tmp_path / "a" / "cells"
    (cells / "s" / "c").mkdir(parents=True)
    (cells / "s" / "c" / "results.json").write_text('{"mrr": 0.5}')
    first = archive.pack(cells).read_bytes()
    other = tmp_path / "b" / "cells"
    (other / "s" / "c").mkdir(parents=True)
    (other / "s" / "c" / "results.json").write_text('{"mrr": 0.5}')
    assert archive.pack(other).read_bytes() == first  # no names, times or owners inside
    import shutil

    shutil.rmtree(other)
    assert archive.folder(other) == other
    assert (other / "s" / "c" / "results.json").read_text() == '{"mrr": 0.5}'
