"""``benchmarks/README.md`` indexes every benchmark script and every results file: a script or a
results file added without a line there (or removed while still listed) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"


def test_every_script_and_results_file_is_in_the_index():
    index = (BENCH / "README.md").read_text()
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh"))
    assert len(scripts) > 30
    missing = [s for s in scripts if f"`{s}`" not in index]
    assert missing == []
    results = BENCH / "results"
    # a results entry is named by its stem (x.md / x.json / x.txt / x.log share one line) or,
    # for a folder, by the folder or each file in it
    named = set(re.findall(r"`([^`]+)`", index))
    unlisted = []
    for path in sorted(results.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(results).as_posix()
        top = rel.split("/")[0]
        stem, suffix = rel.rsplit(".", 1) if "." in rel else (rel, "")
        ok = (
            any(n.startswith(stem) or n == rel for n in named)
            or f"{top}/" in named
            or any(n.startswith(f"{top}/") for n in named)
            or (
                suffix in ("json", "log", "txt")
                and any(n.startswith(Path(stem).name) for n in named)
            )
        )
        if not ok:
            unlisted.append(rel)
    assert unlisted == []
    names = {p.name for p in results.rglob("*")}
    listed = {n for n in named if re.fullmatch(r"[a-z][a-z0-9_]+\.(md|json|txt)", n)}
    gone = [n for n in listed - {"README.md"} if n not in names]
    assert gone == []  # every file the index names exists
