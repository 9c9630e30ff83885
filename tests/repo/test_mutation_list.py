"""``tests/mutation_check.py``'s list is current: every planted bug's piece occurs exactly once
in its product file (else the runner stops on it) and every test it names exists (else the
runner drops that selection, and a bug could go unchecked without anyone seeing it).  The
check is the runner's own (``missing_tests``, the count ``apply`` makes), on this checkout."""

from __future__ import annotations

from tests import mutation_check as mc
from tests.helpers.paths import REPO_ROOT


def test_every_planted_piece_occurs_once_in_its_file():
    assert len(mc.MUTATIONS) >= 20
    counts = {m.name: (REPO_ROOT / m.path).read_text().count(m.old) for m in mc.MUTATIONS}
    assert {name: n for name, n in counts.items() if n != 1} == {}


def test_every_named_test_exists():
    missing = {
        m.name: [x for sel in (*m.tests, *m.integration) for x in mc.missing_tests(REPO_ROOT, sel)]
        for m in mc.MUTATIONS
    }
    assert {name: xs for name, xs in missing.items() if xs} == {}


def test_a_renamed_test_is_missing(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_b():\n    pass\n")
    assert mc.missing_tests(tmp_path, "tests/test_a.py::test_b -k x") == []
    assert mc.missing_tests(tmp_path, "tests/test_a.py::test_c") == ["tests/test_a.py::test_c"]
    assert mc.missing_tests(tmp_path, "tests/test_z.py") == ["tests/test_z.py"]
