"""No project history in the code, the configuration, the tests and the manual: no commit hash
in ``cmpnn_dist/``, ``conf/``, ``launch/``, ``tests/``, ``docs/`` or the README (results files
under ``benchmarks/results/`` keep theirs: they say where a figure came from).

A commit hash is a run of 7 to 40 hexadecimal digits with at least one letter a-f and at least
one digit, not inside a longer word or a longer hex string (a sha256 sum's 64 digits are not a
commit).  ``tests/fixtures/`` is data written by other versions of the code and is not read
(the legacy checkpoint's ``results_at_commit.json`` names the commit that wrote it).  The
hex literals below are not commits and are allowed where they stand:
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.paths import REPO_ROOT as REPO

TREES = ("cmpnn_dist", "conf", "launch", "tests", "docs", "README.md")
SKIP = ("tests/fixtures/",)
HASH = re.compile(
    r"(?<![0-9A-Za-z_])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])"
)
NOT_COMMITS = {
    "0123456789abcdef0": "launch/ray-cluster.yaml: the placeholder EFS id fs-0123456789abcdef0",
    "0a1b2c3d": "tests: the Ray token in the legacy fixture's folder name step_00000004-0a1b2c3d",
    "0000abcd": "tests: the token of a staged copy of best, .tmp-best-0000abcd",
}
NARRATION = re.compile(r"\b(this|previous|last) session\b|\bat commit\b|\bsince commit\b", re.I)


def files() -> list[Path]:
    out = []
    for tree in TREES:
        paths = [REPO / tree] if (REPO / tree).is_file() else sorted((REPO / tree).rglob("*"))
        for path in paths:
            rel = path.relative_to(REPO).as_posix()
            if not path.is_file() or rel.startswith(SKIP) or "__pycache__" in rel:
                continue
            try:
                path.read_text()
            except UnicodeDecodeError:  # images, binaries
                continue
            out.append(path)
    return out


def hashes(text: str) -> list[str]:
    return [m for m in HASH.findall(text) if m not in NOT_COMMITS]


def test_the_pattern_on_hand_made_lines():
    short, longer = "1eb7" + "14a", "c962" + "4a7" + "b3f00"  # split: this file has no hash itself
    assert hashes(f"measured at {short}, see {longer}") == [short, longer]
    assert hashes("sha256 611f0411ac666be4e0270e54bbca67407e14720bfc3099311f0f5eec25c5a947") == []
    assert hashes("colour #d62728, 1234567 facts, deadbeefcafe, e2e, 0x7f, B905") == []
    assert hashes("step_00000004-0a1b2c3d fs-0123456789abcdef0") == []
    assert hashes("abc1234x and x_abc1234") == []  # inside a word
    assert NARRATION.search("as measured in the previous session")


def test_no_commit_hash_or_session_narration_in_code_configs_tests_and_docs():
    found = []
    for path in files():
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            where = f"{path.relative_to(REPO)}:{lineno}"
            found += [f"{where}: {h}" for h in hashes(line)]
            if NARRATION.search(line) and path.name != Path(__file__).name:  # (its examples)
                found.append(f"{where}: {line.strip()[:80]}")
    assert len(files()) > 150  # the trees are read
    assert found == []
