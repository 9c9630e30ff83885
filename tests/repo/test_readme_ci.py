"""CI runs exactly the README's first commands, in order: the promise of a fresh machine."""

from __future__ import annotations

import re

from tests.helpers.paths import REPO_ROOT as REPO


def _commands(text: str) -> list[str]:
    return [line.split("  #")[0].strip() for line in text.splitlines() if line.strip()]


def test_ci_runs_the_readme_commands_in_a_fresh_venv():
    readme = (REPO / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    wanted = _commands(first_block)
    assert wanted[0].startswith("python -m venv "), "the README starts with a fresh venv"
    assert wanted[1:] == [
        'pip install torch==2.13.0 -e ".[dev]"',
        "python -m cmpnn_dist.train",
        "python -m pytest",
    ]
    ci = [c for c in _commands((REPO / ".ci" / "run").read_text()) if not c.startswith("#")]
    start = ci.index(wanted[0])
    assert ci[start : start + len(wanted)] == wanted
    # nothing is installed before the fresh venv is activated
    assert not [c for c in ci[:start] if c.startswith(("pip ", "python -m pip"))]


def test_the_readme_is_short_and_starts_with_those_commands():
    """A newcomer's five minutes: at most 250 lines, the install / run / test block first (before
    any heading), and a link to every guide of the manual's index."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert readme.index("```bash") < readme.index("\n## ")
    index = (REPO / "docs" / "README.md").read_text()
    guides = sorted(set(re.findall(r"\]\(([a-z_]+\.md)\)", index)))
    assert len(guides) >= 15
    for guide in guides:
        assert (REPO / "docs" / guide).is_file(), guide
        assert f"(docs/{guide})" in readme, guide
    listed = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    assert listed == set(guides)  # every guide is in the index, and nothing else
