"""Atomic dataset writer: arrays in memory -> Arrow IPC files + manifest (format.py layout).

Atomicity: everything is written into a hidden sibling folder ``.<name>.building-<id>``, the
manifest as ``manifest.json.partial``; then the folder is renamed to its final name and, as
the very last step, the manifest is renamed to ``manifest.json``.  At no instant does a
folder hold a ``manifest.json`` that is not complete, so a killed conversion never leaves a
folder that opens as a dataset (``open_dataset`` refuses folders without ``manifest.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cmpnn_dist.storage import format as fmt
from cmpnn_dist.storage.csr import fast_csr


@dataclass
class GraphSpec:
    """One graph of a dataset, as in-memory arrays.

    Attributes:
        num_nodes: N.
        entity_names: N strings (pyarrow string array, list or numpy array).
        node_types: int64 [N] ids into the dataset's node-type table, or None.
        facts: split -> int64 [F, 3] ``(h, r, t)``; the message-passing graph (CSR shards) is
            built from ``facts["train"]`` plus inverse edges.
        csr: optional precomputed ``fast_csr(num_nodes, |R|, facts["train"])`` (a converter
            that already sorted the edges passes it to save the sort).
        query_only_relations: relation ids whose training facts are queries only: they are
            left out of the message-passing graph (TRI-SQR's r0).
    """

    num_nodes: int
    entity_names: Any
    node_types: np.ndarray | None = None
    facts: dict[str, np.ndarray] = field(default_factory=dict)
    csr: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    query_only_relations: tuple[int, ...] = ()


def _write_table(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    batches = table.combine_chunks().to_batches()
    batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_batch(batch)  # one batch: every column is one contiguous buffer


def _int_col(a: np.ndarray) -> pa.Array:
    return pa.array(np.ascontiguousarray(a, dtype=np.int64), type=pa.int64())


def _facts_table(facts: np.ndarray) -> pa.Table:
    f = np.asarray(facts, dtype=np.int64).reshape(-1, 3)
    return pa.table(
        [_int_col(f[:, 0]), _int_col(f[:, 1]), _int_col(f[:, 2])], schema=fmt.FACTS_SCHEMA
    )


def _csr_table(indptr: np.ndarray, src: np.ndarray, rel: np.ndarray) -> pa.Table:
    edges = pa.StructArray.from_arrays([_int_col(src), _int_col(rel)], fields=list(fmt.EDGE_TYPE))
    offsets = _int_col(indptr - indptr[0])
    lists = pa.LargeListArray.from_arrays(offsets, edges, type=fmt.CSR_SCHEMA.field(0).type)
    return pa.table([lists], schema=fmt.CSR_SCHEMA)


def _check_graph(gname: str, g: GraphSpec, num_relations: int, num_types: int) -> None:
    if len(g.entity_names) != g.num_nodes:
        raise ValueError(f"graph {gname}: {len(g.entity_names)} names for {g.num_nodes} nodes")
    if g.node_types is not None:
        nt = np.asarray(g.node_types)
        if nt.shape != (g.num_nodes,) or (nt.size and (nt.min() < 0 or nt.max() >= num_types)):
            raise ValueError(f"graph {gname}: node_types must be [N] ids in [0, {num_types})")
    for split, f in g.facts.items():
        if split not in fmt.SPLITS:
            raise ValueError(f"graph {gname}: unknown split {split!r}")
        f = np.asarray(f).reshape(-1, 3)
        if f.size and (
            f[:, [0, 2]].min() < 0
            or f[:, [0, 2]].max() >= g.num_nodes
            or f[:, 1].min() < 0
            or f[:, 1].max() >= num_relations
        ):
            raise ValueError(f"graph {gname} split {split}: ids out of range")


def _write_graph(
    tmp: Path, gname: str, g: GraphSpec, num_relations: int, num_shards: int
) -> dict[str, Any]:
    with_types = g.node_types is not None
    ent_cols = [_int_col(np.arange(g.num_nodes)), pa.array(g.entity_names, type=pa.string())]
    if with_types:
        ent_cols.append(_int_col(g.node_types))
    _write_table(
        tmp / fmt.entities_file(gname), pa.table(ent_cols, schema=fmt.entities_schema(with_types))
    )
    counts = {}
    for split in fmt.SPLITS:
        f = np.asarray(g.facts.get(split, np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
        _write_table(tmp / fmt.facts_file(gname, split), _facts_table(f))
        counts[split] = int(len(f))
    train = np.asarray(g.facts.get("train", np.zeros((0, 3))), dtype=np.int64).reshape(-1, 3)
    query_only = sorted(int(r) for r in g.query_only_relations)
    if query_only:
        train = train[~np.isin(train[:, 1], query_only)]
    if g.csr is not None:
        indptr, src, rel = g.csr
        if len(indptr) != g.num_nodes + 1 or len(src) != 2 * len(train) or len(rel) != len(src):
            raise ValueError(f"graph {gname}: precomputed csr does not match the train facts")
    else:
        indptr, src, rel = fast_csr(g.num_nodes, num_relations, train)
    bounds = fmt.shard_boundaries(indptr, num_shards)
    shards = []
    for k in range(len(bounds) - 1):
        a, b = int(bounds[k]), int(bounds[k + 1])
        lo, hi = int(indptr[a]), int(indptr[b])
        _write_table(
            tmp / fmt.shard_file(gname, k), _csr_table(indptr[a : b + 1], src[lo:hi], rel[lo:hi])
        )
        shards.append(
            {"file": fmt.shard_file(gname, k), "node_start": a, "node_end": b, "num_edges": hi - lo}
        )
    return {
        "num_nodes": int(g.num_nodes),
        "num_edges": int(len(src)),
        "has_node_types": with_types,
        "facts": counts,
        "query_only_relations": query_only,
        "shards": shards,
    }


def write_dataset(
    out_dir: str | Path,
    *,
    name: str,
    relation_names: Sequence[str],
    graphs: dict[str, GraphSpec],
    inductive: bool,
    node_type_names: Sequence[str] = (),
    num_shards: int = 4,
    negatives: dict[str, dict[str, np.ndarray]] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write a complete dataset folder atomically and return its path.

    Args:
        graphs: ``{"train": GraphSpec}`` (transductive) or ``{"train": ..., "test": ...}``.
        negatives: split -> {"head_neg": int64 [F, K], "tail_neg": int64 [F, K]} for graph
            "train" (OGB's official candidates), or None.
        meta: extra JSON-able information stored under the manifest's ``"source"`` key
            (converter, raw path, dropped duplicates, ...).
    """
    out = Path(out_dir).expanduser().resolve()
    expected = ["train", "test"] if inductive else ["train"]
    if sorted(graphs) != sorted(expected):
        raise ValueError(f"graphs must be {expected}, got {sorted(graphs)}")
    num_rel = len(relation_names)
    for gname, g in graphs.items():
        _check_graph(gname, g, num_rel, len(node_type_names))
    out.parent.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}.building-{token}"
    tmp.mkdir()
    try:
        _write_table(
            tmp / "relations.arrow",
            pa.table(
                [_int_col(np.arange(num_rel)), pa.array(list(relation_names), type=pa.string())],
                schema=fmt.RELATIONS_SCHEMA,
            ),
        )
        graph_meta = {g: _write_graph(tmp, g, graphs[g], num_rel, num_shards) for g in expected}
        neg_meta = {}
        for split, d in (negatives or {}).items():
            cols, names = [], []
            for key in ("head_neg", "tail_neg"):
                arr = np.ascontiguousarray(d[key], dtype=np.int64)
                cols.append(
                    pa.FixedSizeListArray.from_arrays(_int_col(arr.reshape(-1)), arr.shape[1])
                )
                names.append(key)
            _write_table(tmp / fmt.negatives_file(split), pa.table(cols, names=names))
            neg_meta[split] = {
                "file": fmt.negatives_file(split),
                "num_queries": len(cols[0]),
                "num_candidates": int(np.asarray(d["head_neg"]).shape[1]),
            }
        files = {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                files[p.relative_to(tmp).as_posix()] = {
                    "bytes": p.stat().st_size,
                    "sha256": fmt.sha256_file(p),
                }
        manifest = {
            "format": fmt.FORMAT_NAME,
            "format_version": fmt.FORMAT_VERSION,
            "name": name,
            "inductive": bool(inductive),
            "created_unix": time.time(),
            "num_relations": num_rel,
            "relations": list(relation_names),
            "node_types": list(node_type_names),
            "graphs": graph_meta,
            "negatives": neg_meta,
            "files": files,
            "source": meta or {},
        }
        _write_manifest(tmp, manifest)
        _commit(tmp, out, token)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _write_manifest(tmp: Path, manifest: dict[str, Any]) -> None:
    with open(tmp / fmt.MANIFEST_PARTIAL, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _commit(tmp: Path, out: Path, token: str) -> None:
    """Rename the built folder into place, then publish its manifest (the commit point)."""
    old = None
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{token}"
        os.replace(out, old)
    os.replace(tmp, out)
    os.replace(out / fmt.MANIFEST_PARTIAL, out / fmt.MANIFEST)
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
