"""``python -m cmpnn_dist.predict.batch ckpt=PATH relation=NAME heads=SPEC top_k=K out=DIR``

Scores every query ``(head, relation, ?)`` of a head set as a Ray job and writes the top-k
tails of each to Parquet parts in ``out``.
Keys:     ``ckpt=`` a checkpoint or run folder (read-only, as ``predict`` reads it);
``relation=NAME``; ``heads=all`` (the entities of the relation's head types), ``type:TYPE``
or ``file:PATH`` (one name a line); ``top_k=K`` or ``top_k=all`` (every candidate);
``out=DIR`` (a new folder, or the folder of this very job to continue it).
Options:  ``known=flag|filter`` (known train / valid / test facts flagged in the ``known``
column, or left out), ``batch_size=`` (queries per forward pass; default ``eval.batch_size``),
``part_size=64`` (queries per Parquet part), ``weights=best|last``, ``graph=train|test``,
``progress=true|false``; ``cluster.num_workers=N`` Ray workers (at least 1),
``cluster.cpus_per_worker`` (also their torch threads), ``cluster.use_gpu=true``,
``cluster.address``; any other ``key=value`` is a config override.

Columns: head, relation, tail, score (the logit), probability, rank, known, head_id, tail_id.
Parts are written whole (temp name, rename) by the driver as workers finish them, next to a
manifest of the job's parameters (``batch_parts.py``); the same command run again skips the
parts that exist, so a killed job continues where it stopped and never writes a row twice.
Candidates are the relation's tail types, as in ``python -m cmpnn_dist.predict``.  A
progress bar (queries/s) and one summary line go to stderr, one JSON line to stdout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from cmpnn_dist.cli.common import int_arg, run_cli, split_args
from cmpnn_dist.errors import UsageError

SPECIAL = [
    "ckpt", "relation", "heads", "top_k", "out", "known", "batch_size", "part_size",
    "weights", "graph", "progress",
]  # fmt: skip
USAGE = (
    "usage: python -m cmpnn_dist.predict.batch ckpt=PATH relation=NAME "
    "heads=all|type:TYPE|file:PATH top_k=K|all out=DIR [known=flag|filter] [batch_size=B] "
    "[part_size=64] [cluster.num_workers=N] [cluster.use_gpu=true]"
)


def _options(special: dict[str, str]) -> dict[str, Any]:
    missing = [k for k in ("ckpt", "relation", "heads", "top_k", "out") if k not in special]
    if missing:
        raise UsageError(f"missing {', '.join(k + '=' for k in missing)}; {USAGE}")
    top_k = 0 if special["top_k"] == "all" else int_arg(special, "top_k", None)
    known = special.get("known", "flag")
    if known not in ("flag", "filter"):
        raise UsageError(f"known={known!r}: choose flag or filter")
    from cmpnn_dist.runs.restore import default_weights

    weights = special.get("weights") or default_weights(special.get("ckpt", ""))
    if weights not in ("best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    progress = special.get("progress", "true").lower()
    if progress not in ("true", "false"):
        raise UsageError(f"progress={special['progress']!r}: choose true or false")
    return {
        "top_k": top_k,
        "known": known,
        "weights": weights,
        "graph": special.get("graph", "train"),
        "batch_size": int_arg(special, "batch_size", None),
        "part_size": int_arg(special, "part_size", 64),
        "progress": progress == "true",
        "out": Path(special["out"]).expanduser().absolute(),
    }


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, SPECIAL)
    opt = _options(special)

    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.predict.batch_heads import select_heads
    from cmpnn_dist.predict.batch_parts import JobFolder, digest, weights_digest
    from cmpnn_dist.predict.batch_scorer import ScorerSetup, make_scorer
    from cmpnn_dist.predict.names import NameIndex
    from cmpnn_dist.runs.restore import load_checkpoint_config
    from cmpnn_dist.storage import open_dataset

    if not any(o.split("=", 1)[0].lstrip("+") == "train.device" for o in overrides):
        overrides = [*overrides, "train.device=auto"]  # where it trained does not matter here
    where = special["ckpt"] if "://" in special["ckpt"] else Path(special["ckpt"]).expanduser()
    location, state, cfg = load_checkpoint_config(where, overrides)
    dataset = ensure_dataset(cfg)
    ds = open_dataset(dataset)
    if opt["graph"] not in ds.graph_names:
        raise UsageError(f"graph={opt['graph']!r}: dataset {ds.name!r} has {ds.graph_names}")
    gd = ds.graph_data(opt["graph"])
    relation = NameIndex(ds.relation_names, "relation").id(special["relation"])
    entities = NameIndex(gd.entity_names, "entity")
    heads = select_heads(special["heads"], gd, entities, relation)
    if not heads:
        raise UsageError(f"heads={special['heads']}: no entity to score")
    best = (state.get("best") or {}).get("state")
    params_used = best if (opt["weights"] == "best" and best is not None) else state["model"]
    part_size = opt["part_size"]
    num_parts = -(-len(heads) // part_size)
    params = {
        "checkpoint": str(location),
        "weights": opt["weights"],
        "weights_sha256": weights_digest(params_used),
        "dataset": ds.name,
        "graph": opt["graph"],
        "relation": ds.relation_names[relation],
        "heads": special["heads"],
        "heads_sha256": digest(heads),
        "num_queries": len(heads),
        "top_k": "all" if opt["top_k"] == 0 else opt["top_k"],
        "known": opt["known"],
        "part_size": part_size,
        "num_parts": num_parts,
    }
    folder = JobFolder(opt["out"])
    done = set(folder.check(params))  # every error above: nothing written yet
    todo = [i for i in range(num_parts) if i not in done]
    done_queries = sum(len(heads[i * part_size : (i + 1) * part_size]) for i in done)
    folder.open(params)
    cfg.cluster.num_workers = max(1, int(cfg.cluster.num_workers))
    setup = ScorerSetup(
        cfg=cfg, state=state, weights=opt["weights"], dataset=str(dataset),
        graph=opt["graph"], relation=relation, top_k=opt["top_k"], known=opt["known"],
        batch_size=opt["batch_size"] or int(cfg.eval.batch_size),
    )  # fmt: skip
    stats: dict[str, Any] = {"rows": 0, "queries": 0, "t0": None, "bar": None}

    def ready(info: list[dict[str, Any]]) -> None:  # the workers hold their models
        stats["t0"] = time.perf_counter()
        stats["bar"] = _progress(len(heads), done_queries, opt["progress"])

    def written(index: int, table: Any) -> None:
        folder.write_part(index, table)
        n = len(heads[index * part_size : (index + 1) * part_size])
        stats["rows"] += table.num_rows
        stats["queries"] += n
        if stats["bar"] is not None:
            stats["bar"].update(n)

    start = time.perf_counter()
    if todo:
        from cmpnn_dist.distributed.batch_scoring import run_scoring_pool

        tasks = [(i, heads[i * part_size : (i + 1) * part_size]) for i in todo]
        try:
            run_scoring_pool(cfg, make_scorer, setup, tasks, written, on_ready=ready)
        finally:
            if stats["bar"] is not None:
                stats["bar"].close()
    end = time.perf_counter()
    scoring_s = end - stats["t0"] if stats["t0"] is not None else 0.0
    qps = stats["queries"] / scoring_s if scoring_s > 0 else None
    device = "cuda" if cfg.cluster.use_gpu else "cpu"
    model = f"{cfg.model.propagation} {cfg.model.num_layers} x {cfg.model.hidden_dim}"
    print(
        f"scored {stats['queries']} of {len(heads)} queries ({params['relation']}, heads="
        f"{special['heads']}, top_k={params['top_k']}): {stats['rows']} rows in "
        f"{len(todo)} parts, {len(done)} parts already there; "
        + (f"{qps:.1f} queries/s " if qps else "")
        + f"on {cfg.cluster.num_workers} {device} worker(s), {model} model, "
        f"{end - start:.1f} s in all -> {special['out']}",  # as the user wrote it (JSON: absolute)
        file=sys.stderr,
    )
    return {
        "out": str(opt["out"]),
        "checkpoint": str(location),
        "relation": params["relation"],
        "num_queries": len(heads),
        "scored_queries": stats["queries"],
        "rows": stats["rows"],
        "parts_written": len(todo),
        "parts_skipped": len(done),
        "workers": cfg.cluster.num_workers,
        "device": device,
        "scoring_seconds": round(scoring_s, 4),
        "seconds": round(end - start, 4),
        "queries_per_s": round(qps, 2) if qps else None,
    }


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=initial, unit="q", unit_scale=False, desc="scoring",
        file=sys.stderr, dynamic_ncols=True, smoothing=0.1,
    )  # fmt: skip


def main() -> None:
    sys.exit(run_cli(_main))
