"""The suites and their targets: what ``python -m benchmarks`` lists and runs.

A suite is a package ``benchmarks/<suite>/`` whose ``__init__`` declares ``TARGETS``: each a
:class:`Target`, the module it runs (``python -m benchmarks.<suite>.<module>``), the arguments
of the figure its results file holds, and, where the script has a cheap mode, the arguments of
a quick run (``--quick``) that checks the target still works end to end in seconds to a minute.
A quick run writes under a scratch folder (``{tmp}`` in its arguments), never over a committed
figure.  ``needs`` names what a target cannot run without (``cuda``, ``peer``: NBFNet-PyG's
set-up, ``shared-data``: ``../shared/data``); the runner skips it, saying why, where that is
missing.  Quick runs are CPU runs: a quick run of a target that needs a card for its figure runs
anyway.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

SUITES = (
    "ops", "step", "pruned", "accuracy", "serving", "storage", "cluster", "wl", "house", "device",
)  # fmt: skip
STUDIES = "studies"  # frozen one-off investigations: listed, not run


@dataclass(frozen=True)
class Target:
    """One benchmark of a suite.

    ``module``: the script's module name inside its suite; ``args``: the arguments of the figure
    in its results file; ``quick``: the arguments of a quick run (``None``: it has none);
    ``needs``: what it cannot run without; ``what``: one line on what it measures."""

    module: str
    what: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] | None = None
    needs: tuple[str, ...] = ()
    name: str = field(default="")

    def label(self) -> str:
        return self.name or self.module


def targets(suite: str) -> list[Target]:
    """The targets ``benchmarks/<suite>/__init__.py`` declares."""
    if suite not in (*SUITES, STUDIES):
        raise KeyError(f"no suite {suite!r}; the suites: {', '.join(SUITES)} (and {STUDIES})")
    return list(importlib.import_module(f"benchmarks.{suite}").TARGETS)


def summary(suite: str) -> str:
    """The first line of the suite's docstring."""
    doc = importlib.import_module(f"benchmarks.{suite}").__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def missing(target: Target, quick: bool = False) -> str | None:
    """Why ``target`` (its quick run when ``quick``) cannot run here, or ``None``."""
    for need in target.needs:
        if need == "cuda" and not quick:
            import torch

            if not torch.cuda.is_available():
                return "needs a CUDA device"
        elif need == "peer":
            from benchmarks.harness.peer import peer_python

            if peer_python() is None:
                return "needs NBFNet-PyG's virtual environment (../shared/peers/nbfnet-pyg/)"
        elif need == "shared-data":
            from benchmarks.harness.peer import DATA

            if not DATA.is_dir():
                return f"needs {DATA}"
    return None
