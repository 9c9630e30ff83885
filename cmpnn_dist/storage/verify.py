"""Full dataset check: every file's sha256 plus the structural checks of every shard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.storage import format as fmt
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.format import check_checksums

__all__ = ["check_checksums", "verify_dataset"]


def verify_dataset(path: str | Path) -> dict[str, Any]:
    """Checksums, then open every graph, shard, fact split and negatives table.

    Returns a summary ``{"name", "files", "bytes", "graphs": {g: {"nodes", "edges", "shards",
    "facts"}}}``; raises StorageError on the first problem.
    """
    from cmpnn_dist.storage.reader import open_dataset

    ds = open_dataset(path, verify="full")
    summary: dict[str, Any] = {
        "name": ds.name,
        "path": str(ds.path),
        "files": len(ds.manifest["files"]),
        "bytes": sum(f["bytes"] for f in ds.manifest["files"].values()),
        "graphs": {},
    }
    for gname in ds.graph_names:
        g = ds.graph_data(gname)
        shards = g.shards()
        facts = {s: int(len(g.facts(s))) for s in fmt.SPLITS}
        msg_facts = facts["train"]
        if g.query_only_relations:
            rel = g.facts("train")[:, 1]
            msg_facts -= int(sum(int((rel == q).sum()) for q in g.query_only_relations))
        if msg_facts * 2 != g.num_edges:
            raise StorageError(
                f"graph {gname}: {g.num_edges} edges for {msg_facts} train "
                "facts (expected 2 per fact)",
                ds.path / fmt.MANIFEST,
            )
        summary["graphs"][gname] = {
            "nodes": g.num_nodes,
            "edges": g.num_edges,
            "shards": len(shards),
            "facts": facts,
        }
        _ = g.entity_names
    for split in ds.manifest.get("negatives", {}):
        ds.negatives(split)
    return summary
