"""CI runs exactly the README's first commands, in order: the promise of a fresh machine."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
