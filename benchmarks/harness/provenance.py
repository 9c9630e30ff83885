"""Where a benchmark figure came from: the checkout's commit, the command that reruns it, the
commands it ran as children, and the message-passing path that ran."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cmpnn_dist.training.reproducibility import cpu_model  # noqa: F401 (re-exported)

REPO = Path(__file__).resolve().parents[2]


def git_commit(*rev_flags: str, mark_dirty: bool = False) -> str:
    """``git rev-parse [rev_flags] HEAD`` of this checkout (e.g. ``"--short"``), with
    ``+dirty`` appended when ``mark_dirty`` and tracked files other than the results
    (``benchmarks/results/``, which the benchmarks themselves write) differ from it;
    ``unknown`` outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        rev = git("rev-parse", *rev_flags, "HEAD")
        dirty = mark_dirty and git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results"
        )
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def command_line(
    script: str,
    argv: Sequence[str],
    drop_flags: Iterable[str] = (),
    drop_options: Iterable[str] = (),
) -> str:
    """The shell command that reruns a benchmark: ``python -m benchmarks.<suite>.<name>`` of the
    script at ``benchmarks/<suite>/<name>.py``, and ``argv``, each argument quoted
    (``shlex.join``), so that ``shlex.split`` of the result gives the arguments back.

    ``script`` is the caller's ``__file__``.  Arguments equal to a name in ``drop_flags`` are
    left out, and so is a name in ``drop_options`` with its value, in both spellings
    (``--opt VALUE`` and ``--opt=VALUE``): options that shape a summary, not the figures it
    records.  Names are matched whole, as argparse sees them on the command line; an argument
    that only begins like one (``--collect-all``, the value ``"--collect this"`` of another
    option) is kept, and so are abbreviations argparse would accept.
    """
    flags, options = frozenset(drop_flags), frozenset(drop_options)
    kept: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg in options:
            next(args, None)  # the option's value
        elif arg not in flags and arg.split("=", 1)[0] not in options:
            kept.append(arg)
    return shlex.join(["python", "-m", module_of(script), *kept])


def module_of(script: str | Path) -> str:
    """``benchmarks.<suite>.<name>``: the module name of the script at ``script``
    (``.../benchmarks/<suite>/<name>.py``, in this checkout or another)."""
    parts = Path(script).with_suffix("").parts
    if "benchmarks" not in parts:
        raise ValueError(f"{script} is not a script under benchmarks/")
    start = len(parts) - 1 - parts[::-1].index("benchmarks")
    return ".".join(parts[start:])


def module_argv(script: str | Path) -> list[str]:
    """``[python, "-m", "benchmarks.<suite>.<name>"]``: how a script starts a copy of itself
    (run from the repository root, as every benchmark is)."""
    return [sys.executable, "-m", module_of(script)]


def child_command(cmd: Sequence[str]) -> str:
    """The shell command a benchmark ran as a subprocess (``[sys.executable, "-m", ...]``), as a
    person would type it: the interpreter's path shown as ``python``, each argument quoted
    (``shlex.join``), so that ``shlex.split`` of the result gives the arguments back."""
    parts = list(cmd)
    if parts and parts[0] == sys.executable:
        parts[0] = "python"
    return shlex.join(parts)


@contextmanager
def ops_paths() -> Iterator[set[str]]:
    """The ``ops`` implementations resolved while the block runs (``cpu``: the compiled
    kernel), as a set filled in place: what ran, not what ``auto`` would pick for a guess."""
    import cmpnn_dist.ops as ops

    resolve, seen = ops.resolve_impl, set()

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        name = resolve(*args, **kwargs)
        seen.add(name)
        return name

    ops.resolve_impl = recording
    try:
        yield seen
    finally:
        ops.resolve_impl = resolve
