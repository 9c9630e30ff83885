"""``python -m cmpnn_dist.storage verify PATH`` (sha256 + structure) and ``info PATH``."""

from __future__ import annotations

import argparse
import json
import sys

from cmpnn_dist.storage.errors import StorageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cmpnn_dist.storage", description="Inspect and verify graph-store datasets."
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="check every file's sha256 and every shard's structure")
    v.add_argument("path")
    i = sub.add_parser("info", help="print the manifest summary (cheap checks only)")
    i.add_argument("path")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "verify":
            from cmpnn_dist.storage.verify import verify_dataset

            print(json.dumps(verify_dataset(args.path), indent=1))
            print("OK", file=sys.stderr)
        else:
            from cmpnn_dist.storage.reader import open_dataset

            ds = open_dataset(args.path)
            m = {k: v for k, v in ds.manifest.items() if k not in ("files", "relations")}
            print(json.dumps(m, indent=1))
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
