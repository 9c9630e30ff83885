"""On-disk layout of a dataset folder (format version 1); see ``storage/README.md``.

A dataset is a folder::

    manifest.json                    written last; a folder without it is not a dataset
    relations.arrow                  id int64, name string                       [|R|]
    graphs/<g>/entities.arrow        id int64, name string, type int64 (optional) [N_g]
    graphs/<g>/facts_<split>.arrow   head, relation, tail int64                 [F, 3 columns]
    graphs/<g>/csr_<k:05d>.arrow     in_edges: large_list<struct<src, rel>>, one row per
                                     destination node of shard k (node_start..node_end)
    negatives_<split>.arrow          head_neg, tail_neg fixed_size_list<int64, K> (OGB only)

``<g>`` is ``train`` (and ``test`` for inductive datasets); ``<split>`` is train|valid|test.
In a CSR shard the list offsets are the local row offsets ``indptr`` [rows+1] (starting at
0), the struct children are ``src`` [E_k] and ``rel`` [E_k]; an edge ``src -rel-> dst`` with
``rel >= |R|`` is the inverse of fact ``(dst, rel-|R|, src)``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cmpnn_dist.storage.errors import StorageError

FORMAT_NAME = "cmpnn_dist.graph_store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MANIFEST_PARTIAL = "manifest.json.partial"
SPLITS = ("train", "valid", "test")

RELATIONS_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
FACTS_SCHEMA = pa.schema([("head", pa.int64()), ("relation", pa.int64()), ("tail", pa.int64())])
EDGE_TYPE = pa.struct(
    [pa.field("src", pa.int64(), nullable=False), pa.field("rel", pa.int64(), nullable=False)]
)
CSR_SCHEMA = pa.schema(
    [pa.field("in_edges", pa.large_list(pa.field("edge", EDGE_TYPE, nullable=False)))]
)


def entities_schema(with_types: bool) -> pa.Schema:
    fields = [("id", pa.int64()), ("name", pa.string())]
    if with_types:
        fields.append(("type", pa.int64()))
    return pa.schema(fields)


def graph_dir(graph: str) -> str:
    return f"graphs/{graph}"


def facts_file(graph: str, split: str) -> str:
    return f"{graph_dir(graph)}/facts_{split}.arrow"


def entities_file(graph: str) -> str:
    return f"{graph_dir(graph)}/entities.arrow"


def shard_file(graph: str, k: int) -> str:
    return f"{graph_dir(graph)}/csr_{k:05d}.arrow"


def negatives_file(split: str) -> str:
    return f"negatives_{split}.arrow"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def check_checksums(root: Path, manifest: dict[str, Any]) -> None:
    """Raise StorageError naming the first file whose sha256 differs from the manifest."""
    for rel, info in manifest["files"].items():
        digest = sha256_file(root / rel)
        if digest != info["sha256"]:
            raise StorageError(
                f"sha256 {digest[:16]}... differs from manifest "
                f"{info['sha256'][:16]}... (file altered)",
                root / rel,
            )


def shard_boundaries(indptr: np.ndarray, num_shards: int) -> np.ndarray:
    """Destination-node boundaries ``b`` [S+1] that balance edge counts across shards.

    Shard ``k`` holds rows ``b[k]:b[k+1]``; ``b[k]`` is the first row whose edge offset
    reaches ``k * E / S`` (so every shard has at most ``E/S + max_degree`` edges), then nudged
    so every shard holds at least one row.  ``S = min(num_shards, N)`` (at least 1).
    """
    n = len(indptr) - 1
    s = max(1, min(int(num_shards), n)) if n > 0 else 1
    total = int(indptr[-1])
    targets = (np.arange(1, s) * total) / s
    inner = np.searchsorted(indptr, targets, side="left").astype(np.int64)
    b = np.concatenate([[0], inner, [n]]).astype(np.int64)
    for k in range(1, s):  # forward pass: strictly increasing
        b[k] = max(b[k], b[k - 1] + 1)
    for k in range(s - 1, 0, -1):  # backward pass: leave a row for every later shard
        b[k] = min(b[k], b[k + 1] - 1)
    return b


def read_manifest(root: Path) -> dict[str, Any]:
    """Load and sanity-check ``root/manifest.json``; raise StorageError naming the problem."""
    path = root / MANIFEST
    if not root.is_dir():
        raise StorageError("no such dataset folder", root)
    if not path.is_file():
        hint = " (a conversion was interrupted?)" if (root / MANIFEST_PARTIAL).exists() else ""
        raise StorageError(f"missing {MANIFEST}: not a complete dataset{hint}", path)
    try:
        m = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StorageError(f"unreadable manifest: {exc}", path) from exc
    if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
        raise StorageError(f"not a {FORMAT_NAME} manifest", path)
    if m.get("format_version") != FORMAT_VERSION:
        raise StorageError(
            f"format_version {m.get('format_version')!r}, this reader supports {FORMAT_VERSION}",
            path,
        )
    for key in ("name", "inductive", "num_relations", "relations", "node_types", "graphs", "files"):
        if key not in m:
            raise StorageError(f"manifest lacks key {key!r}", path)
    if len(m["relations"]) != m["num_relations"]:
        raise StorageError("len(relations) != num_relations", path)
    return m
