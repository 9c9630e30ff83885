"""``python -m cmpnn_dist.convert SOURCE OUT_DIR [options]``: build a graph-store dataset.

Examples::

    python -m cmpnn_dist.convert tsv:inductive storage/datasets/fb237_v1 \\
        --raw ../shared/data/inductive/fb237_v1
    python -m cmpnn_dist.convert synthetic:rule_kg storage/datasets/rule_kg --param seed=3
    python -m cmpnn_dist.convert ogb:biokg storage/datasets/biokg --raw storage/raw/ogb
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from cmpnn_dist.convert import build_dataset, sources
from cmpnn_dist.storage.errors import StorageError


def _param(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--param wants KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cmpnn_dist.convert",
        description="Convert a graph source into an Arrow dataset.",
    )
    parser.add_argument("source", choices=sources.names())
    parser.add_argument("out_dir", help="dataset folder to create (replaced atomically)")
    parser.add_argument("--raw", dest="raw_path", help="folder of the raw files / OGB root")
    parser.add_argument("--shards", type=int, default=4, help="CSR shards per graph")
    parser.add_argument("--name", help="dataset name (default: raw folder or generator name)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--drop-unseen-entities",
        action="store_true",
        help="drop valid/test facts whose entity is not in training (counted)",
    )
    group.add_argument(
        "--keep-unseen-entities",
        action="store_true",
        help="add unseen valid/test entities as isolated nodes",
    )
    parser.add_argument("--node-types", help="'prefix' (Kind::id names) or a TSV entity<TAB>type")
    parser.add_argument(
        "--param",
        action="append",
        type=_param,
        default=[],
        help="synthetic generator parameter KEY=VALUE (JSON value), repeatable",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    try:
        out = build_dataset(
            args.source,
            args.out_dir,
            raw_path=args.raw_path,
            num_shards=args.shards,
            name=args.name,
            drop_unseen_entities=args.drop_unseen_entities,
            keep_unseen_entities=args.keep_unseen_entities,
            node_types=args.node_types,
            synthetic=dict(args.param),
        )
        from cmpnn_dist.storage import open_dataset

        ds = open_dataset(out)
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {
        "path": str(out),
        "name": ds.name,
        "inductive": ds.inductive,
        "relations": ds.num_relations,
        "seconds": round(time.perf_counter() - t0, 3),
        "graphs": {
            g: {"nodes": m["num_nodes"], "facts": m["facts"], "shards": len(m["shards"])}
            for g, m in ds.manifest["graphs"].items()
        },
        "stats": ds.source.get("stats", {}),
    }
    print(json.dumps(summary))
    return 0
