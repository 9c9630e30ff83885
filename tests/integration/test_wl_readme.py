"""The README's ``python -m cmpnn_dist.wl`` examples, run as written: each command's printed
lines (all but the trailing JSON line) must equal the README's, and the JSON line must say the
same thing."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers.paths import REPO_ROOT as REPO


def readme_examples() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of every ``$ python -m cmpnn_dist.wl`` in README.md."""
    text = (REPO / "README.md").read_text()
    examples: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        current: list[str] | None = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = [] if line.startswith("$ python -m cmpnn_dist.wl ") else None
                if current is not None:
                    examples.append((line[2:], current))
            elif current is not None:
                current.append(line)
    return examples


EXAMPLES = readme_examples()


def test_the_readme_has_the_examples():
    assert len(EXAMPLES) >= 1
    assert all(cmd.startswith("python -m cmpnn_dist.wl ") and out for cmd, out in EXAMPLES)


@pytest.mark.integration
@pytest.mark.parametrize("command, expected", EXAMPLES, ids=[c.split()[3] for c, _ in EXAMPLES])
def test_readme_example_prints_what_the_readme_says(command, expected):
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "cmpnn_dist.wl"]
    proc = subprocess.run(
        [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[:-1] == expected
    results = json.loads(lines[-1])["results"]
    for line in expected:  # the JSON line agrees: test, rounds, verdict
        test, rounds = line.split()[:2]
        assert results[test]["rounds"] == int(rounds)
        assert results[test]["distinguished"] == line.endswith("-> distinguished")
    verdicts = [line.endswith("-> distinguished") for line in expected]
    assert verdicts == [False, True]  # each example: the weaker test fails, the stronger one not
