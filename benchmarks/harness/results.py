"""Where a suite's figures live and how they are written.

A script at ``benchmarks/<suite>/<name>.py`` writes under ``benchmarks/results/<suite>/``
(:func:`results_dir`).  Every file is written whole or not at all
(:func:`cmpnn_dist.storage.atomic.write_atomic`: a temporary sibling, then a rename), so a
benchmark stopped half way leaves the previous figure, never half of a new one.
"""

from __future__ import annotations

import json
from pathlib import Path

from cmpnn_dist.storage.atomic import write_atomic  # re-exported: the suites' one atomic write

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"


def results_dir(script: str | Path) -> Path:
    """``benchmarks/results/<suite>/`` for the script at ``benchmarks/<suite>/<name>.py``
    (its ``__file__``), or for a suite's name."""
    path = Path(script)
    suite = path.resolve().parent.name if path.suffix == ".py" else str(script)
    return RESULTS / suite


def save_results(out: str | Path, stem: str, result: dict, markdown: str | None = None) -> None:
    """``out/stem.json`` (``result``, indented) and, given ``markdown``, ``out/stem.md``, each
    written whole."""
    out = Path(out)
    write_atomic(out / f"{stem}.json", json.dumps(result, indent=1))
    if markdown is not None:
        write_atomic(out / f"{stem}.md", markdown)
