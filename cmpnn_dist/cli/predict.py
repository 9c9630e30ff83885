"""``python -m cmpnn_dist.predict ckpt=PATH head=NAME relation=NAME [topk=10] ...``

One query:  ``head=H relation=R`` (tail prediction), ``tail=T relation=R`` (head prediction,
through the inverse relation), or ``head=H relation=R tail=T`` (that fact's rank).
Batch:      ``queries=FILE.tsv`` (``head<TAB>relation[<TAB>tail]``, ``?`` marks the entity
to predict) and ``out=FILE.csv|.parquet`` (written to a temporary name, then renamed).
Options:    ``topk=10``, ``known=flag|filter`` (known train / valid / test facts flagged in the
``known`` column, or left out), ``explain=K`` (the K most important paths of each row),
``draw=FILE.png|.svg`` (the first row's explanation subgraph), ``beam=10`` and
``wait=true|false`` (the path search, see explain.py), ``weights=best|last``,
``graph=train|test`` (inductive datasets), ``device=cpu|cuda``; any other ``key=value`` is a
config override (e.g. ``storage_root=...``).  The table goes to stdout, then one JSON line.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from cmpnn_dist.cli.common import int_arg, run_cli, split_args
from cmpnn_dist.errors import UsageError
from cmpnn_dist.predict.names import Query, read_queries
from cmpnn_dist.storage.atomic import write_atomic

SPECIAL = [
    "ckpt",
    "head",
    "relation",
    "tail",
    "topk",
    "known",
    "queries",
    "out",
    "explain",
    "draw",
    "weights",
    "graph",
    "device",
    "beam",
    "wait",
]
USAGE = (
    "usage: python -m cmpnn_dist.predict ckpt=PATH (head=NAME relation=NAME [tail=NAME] | "
    "tail=NAME relation=NAME | queries=FILE.tsv [out=FILE.csv|.parquet]) [topk=10] "
    "[known=flag|filter] [explain=K] [draw=FILE.png|.svg]"
)


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """CSV (``.csv``, ``.tsv``) or Parquet (``.parquet``, ``.pq``), encoded in memory, then
    a temp file and a rename (a full disk is one error naming ``path``)."""
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".parquet", ".pq"):
        raise UsageError(f"out={path}: use a .csv, .tsv or .parquet file name")
    if not path.parent.is_dir():
        raise UsageError(f"out={path}: folder {path.parent} does not exist")
    if suffix in (".parquet", ".pq"):
        data = frame.to_parquet(None, index=False)
    else:
        data = frame.to_csv(None, index=False, sep="\t" if suffix == ".tsv" else ",")
    write_atomic(path, data)


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, SPECIAL)
    if "ckpt" not in special:
        raise UsageError(USAGE)
    single = any(k in special for k in ("head", "tail"))
    if single == ("queries" in special):
        raise UsageError("give either head= / tail= with relation=, or queries=FILE; " + USAGE)
    if single and "relation" not in special:
        raise UsageError("relation= is missing; " + USAGE)
    topk = int_arg(special, "topk", 10, 1)
    explain = int_arg(special, "explain", 0, 0)
    beam = int_arg(special, "beam", 10, 1)
    wait = special.get("wait", "true").lower()
    if wait not in ("true", "false"):
        raise UsageError(f"wait={special['wait']!r}: choose true or false")
    known = special.get("known", "flag")
    if known not in ("flag", "filter"):
        raise UsageError(f"known={known!r}: choose flag or filter")
    out = Path(special["out"]).expanduser() if "out" in special else None
    draw = Path(special["draw"]).expanduser() if "draw" in special else None
    if draw is not None and draw.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"draw={draw}: use a .png, .svg or .pdf file name")
    from cmpnn_dist.runs.folder import check_not_run_file

    for key, target in (("out", out), ("draw", draw)):
        if target is not None:
            check_not_run_file(target, key)
    if single:
        queries = [Query(special.get("head"), special["relation"], special.get("tail"))]
    else:
        queries = read_queries(Path(special["queries"]).expanduser())

    from cmpnn_dist.predict.predictor import Predictor

    predictor = Predictor.from_checkpoint(
        special["ckpt"],
        overrides,
        weights=special.get("weights"),
        graph=special.get("graph", "train"),
        device=special.get("device"),
    )
    start = time.perf_counter()
    frame = predictor.predict_batch(queries, topk=topk, known=known)
    seconds = time.perf_counter() - start
    if explain or draw is not None:
        k = explain or 3
        explanations = [
            predictor.explain_row(r, k, beam, wait == "true") for r in frame.itertuples()
        ]
        if explain:
            frame["paths"] = [e.summary() for e in explanations]
        if draw is not None and explanations:
            from cmpnn_dist.predict.draw import draw_explanation

            draw_explanation(explanations[0], draw)
    if out is not None:
        write_table(frame, out)
    result: dict[str, Any] = {
        "checkpoint": special["ckpt"],
        "num_queries": len(queries),
        "rows": len(frame),
        "seconds": round(seconds, 4),
        "queries_per_s": round(len(queries) / seconds, 2) if seconds > 0 else None,
        "device": str(predictor.device),
    }
    if out is not None:
        result["out"] = str(out)
    if draw is not None:
        result["draw"] = str(draw)
    if single:
        shown = frame.drop(columns=["query_id", "head_id", "tail_id", "paths"], errors="ignore")
        with pd.option_context("display.max_colwidth", 80, "display.width", 200):
            print(shown.to_string(index=False))
        if explain:  # one path per line under the table (a row of k paths is unreadable)
            for row, expl in zip(frame.itertuples(), explanations, strict=True):
                print(f"paths to {row.target} rank {row.rank} ({row.head}, {row.relation}, "
                      f"{row.tail}):")  # fmt: skip
                for i, (imp, edges) in enumerate(expl.paths, start=1):
                    print(f"  #{i}  {imp:.4g}  {expl.path_text(edges)}")
                if not expl.paths:
                    print("  no path")
    print(
        f"predicted {len(queries)} queries ({len(frame)} rows) in {seconds:.3f} s "
        f"on {predictor.device}" + (f" -> {out}" if out is not None else ""),
        file=sys.stderr,
    )
    return result


def main() -> None:
    sys.exit(run_cli(_main))
