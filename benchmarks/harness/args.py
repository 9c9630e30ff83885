"""The argument parser every benchmark script starts from.

:func:`make_parser` gives the script's docstring as its ``--help`` text (whole, as written: the
docstring is the benchmark's manual) and the program name a person types,
``python -m benchmarks.<suite>.<name>``.  The suites' runner passes arguments through
unchanged, so a script's own options stay its own.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.harness.provenance import module_of


def make_parser(doc: str | None, script: str | Path) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` for the script at ``script`` (its ``__file__``) described by
    ``doc`` (its ``__doc__``)."""
    return argparse.ArgumentParser(
        prog=f"python -m {module_of(script)}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
