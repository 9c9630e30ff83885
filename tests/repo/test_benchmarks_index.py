"""``benchmarks/README.md`` indexes every benchmark script and every results file, suite by suite:
a script or a results file added without a line there (or removed while still listed) fails
here, and so does a results file outside its suite's folder."""

from __future__ import annotations

import re

from tests.helpers.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
SKIP = {"__init__.py", "__main__.py"}


def sections() -> dict[str, str]:
    """The index's text per suite (its ``## <suite>: ...`` section)."""
    text = (BENCH / "README.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.split(":")[0].split()[0]: p for p in parts}


def test_every_script_is_indexed_in_its_suites_section():
    index = sections()
    scripts = [p for p in BENCH.glob("*/*.py") if p.parent.name not in ("harness", "tests")]
    assert len(scripts) > 40
    missing = [
        f"{p.parent.name}/{p.name}"
        for p in scripts
        if p.name not in SKIP and f"`{p.name}`" not in index.get(p.parent.name, "")
    ]
    assert missing == []
    harness = [p.name for p in (BENCH / "harness").glob("*.py") if p.name not in SKIP]
    assert [h for h in harness if f"`{h}`" not in index["The"]] == []  # "The harness"


def test_every_results_file_is_indexed_in_its_suites_section():
    index = sections()
    results = BENCH / "results"
    assert not [p.name for p in results.iterdir() if p.is_file()]  # every file in a suite folder
    unlisted = []
    for path in sorted(p for p in results.rglob("*") if p.is_file()):
        rel = path.relative_to(results)
        suite, rest = rel.parts[0], "/".join(rel.parts[1:])
        if any(part.endswith("_runs") or part.endswith("ranks") for part in rel.parts[1:-1]):
            continue  # an archive's unpacked copy (git ignores it)
        named = set(re.findall(r"`([^`]+)`", index.get(suite, "")))
        top = rest.split("/")[0]
        stem = rest.rsplit(".", 1)[0]
        ok = (
            rest in named
            or f"{top}/" in named
            or any(n.startswith(f"{top}/") for n in named)
            or any(n.startswith(stem) for n in named)
            or any(n.startswith(top.split(".")[0]) for n in named)
        )
        if not ok:
            unlisted.append(str(rel))
    assert unlisted == []


def test_every_results_file_the_index_names_exists():
    for suite, text in sections().items():
        folder = BENCH / "results" / suite
        if not folder.is_dir():
            continue
        names = {p.name for p in folder.rglob("*")}
        listed = {n for n in re.findall(r"`([^`]+)`", text)
                  if re.fullmatch(r"[a-z][a-z0-9_]+\.(md|json|txt|tar\.gz)", n)}  # fmt: skip
        gone = [n for n in listed if n not in names and not n.endswith(".py")]
        assert gone == [], suite
