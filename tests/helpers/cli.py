"""Running a command as a user does, and what a refused command must leave alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO_ROOT as REPO


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m module args...`` from the repository root, output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, needle: str) -> None:
    """Exit status 2, one ``error:`` line on stderr that contains ``needle``, nothing on stdout."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert needle in lines[0], lines[0]
    assert proc.stdout.strip() == ""


def listing(root: Path) -> list[str]:
    """Every path under ``root`` (relative, sorted): what a refused command must not change."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
