"""Vectorised pieces shared by the converters: vocabularies, id encoding, de-duplication.

No Python loop runs per fact: vocabularies are ``pyarrow.compute.unique`` + sort, encoding is
``pyarrow.compute.index_in`` (hash lookups), de-duplication is one ``torch.sort`` of the
int64 keys ``h << (bn + br) | r << bn | t`` (bit-packed ids).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from cmpnn_dist.storage.csr import bits
from cmpnn_dist.storage.errors import StorageError

log = logging.getLogger("cmpnn_dist.convert")


def vocabulary(*columns: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Sorted distinct strings of all ``columns`` (string array [V])."""
    parts = []
    for c in columns:
        parts.extend(c.chunks if isinstance(c, pa.ChunkedArray) else [c])
    if not parts:
        return pa.array([], type=pa.string())
    uniq = pc.unique(pa.chunked_array(parts, type=pa.string()))
    return pc.take(uniq, pc.sort_indices(uniq))


def encode_vocabulary(*columns: pa.ChunkedArray) -> tuple[pa.Array, list[np.ndarray]]:
    """One hash pass over ``columns``: (sorted vocabulary [V], int64 ids of each column).

    ``dictionary_encode`` of the concatenated chunks yields one shared dictionary; the
    dictionary is then sorted (V strings, cheap) and the ids remapped by a gather.
    """
    chunks = [ch for c in columns for ch in c.chunks if len(ch)]
    if not chunks:
        return pa.array([], type=pa.string()), [np.zeros(0, np.int64) for _ in columns]
    enc = pc.dictionary_encode(pa.chunked_array(chunks, type=pa.string()))
    dictionary = enc.chunks[-1].dictionary
    if any(len(ch.dictionary) != len(dictionary) for ch in enc.chunks):
        enc = pa.table({"x": enc}).unify_dictionaries().column("x")
        dictionary = enc.chunks[-1].dictionary
    idx = np.concatenate([ch.indices.to_numpy(zero_copy_only=False) for ch in enc.chunks])
    order = pc.sort_indices(dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    ids = rank[idx]
    out, pos = [], 0
    for c in columns:
        out.append(ids[pos : pos + len(c)])
        pos += len(c)
    return dictionary.take(pa.array(order)), out


def encode(column: pa.ChunkedArray | pa.Array, vocab: pa.Array) -> np.ndarray:
    """int64 [len(column)]: position of each string in ``vocab``, -1 where absent."""
    idx = pc.index_in(column, value_set=vocab)
    idx = pc.fill_null(idx, -1)
    if isinstance(idx, pa.ChunkedArray):
        idx = idx.combine_chunks()
    return idx.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def dedupe(facts: np.ndarray, num_nodes: int, num_relations: int) -> tuple[np.ndarray, int]:
    """Drop repeated facts, keeping each first occurrence in file order.

    Returns ``(facts [F', 3], F - F')``.
    """
    facts = np.asarray(facts, dtype=np.int64).reshape(-1, 3)
    if len(facts) < 2:
        return facts, 0
    bn, br = bits(num_nodes), bits(num_relations)
    if 2 * bn + br <= 63:
        t = torch.from_numpy(facts)
        keys = (t[:, 0] << (bn + br)) | (t[:, 1] << bn) | t[:, 2]
        sorted_keys, order = torch.sort(keys, stable=True)
        first = torch.ones(len(keys), dtype=torch.bool)
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
        if bool(first.all()):
            return facts, 0
        keep = torch.zeros(len(keys), dtype=torch.bool)
        keep[order[first]] = True
        kept = facts[keep.numpy()]
    else:
        _, idx = np.unique(facts, axis=0, return_index=True)
        kept = facts[np.sort(idx)]
    return kept, len(facts) - len(kept)


def line_of_row(path: Path, row: int, skip_header: bool = False) -> int:
    """1-based line number of data row ``row`` (empty lines and a header are skipped)."""
    seen = -1
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip(b"\r\n"):
                continue
            if skip_header and seen == -1 and lineno == 1:
                continue
            seen += 1
            if seen == row:
                return lineno
    return -1


def encode_split(
    path: Path,
    table: pa.Table,
    entities: pa.Array,
    relations: pa.Array,
    *,
    allow_unseen: str = "error",
    skip_header: bool = False,
    what: str = "training",
    known_ids: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, int]:
    """Encode one split's string table to int64 [F, 3]; handle unseen ids; return (facts, dropped).

    Unseen relations are always an error.  Unseen entities: ``allow_unseen="error"`` raises,
    ``"drop"`` drops those facts (their count is returned).  ``known_ids``: (h, r, t) ids
    already computed by :func:`encode_vocabulary` (skips the lookups).
    """
    if known_ids is not None:
        h, r, t = known_ids
    else:
        h = encode(table.column("head"), entities)
        r = encode(table.column("relation"), relations)
        t = encode(table.column("tail"), entities)
    bad_r = np.flatnonzero(r < 0)
    if len(bad_r):
        row = int(bad_r[0])
        name = table.column("relation")[row].as_py()
        raise StorageError(
            f"line {line_of_row(path, row, skip_header)}: relation {name!r} never occurs in "
            f"{what} ({len(bad_r)} facts with unseen relations)",
            path,
        )
    bad_e = (h < 0) | (t < 0)
    n_bad = int(bad_e.sum())
    if n_bad and allow_unseen != "drop":
        row = int(np.flatnonzero(bad_e)[0])
        ent = table.column("head")[row].as_py() if h[row] < 0 else table.column("tail")[row].as_py()
        raise StorageError(
            f"line {line_of_row(path, row, skip_header)}: entity {ent!r} never occurs in "
            f"{what} ({n_bad} facts with unseen entities); drop them with "
            "data.drop_unseen_entities=true (convert: --drop-unseen-entities) or keep them as "
            "isolated nodes with data.keep_unseen_entities=true (--keep-unseen-entities)",
            path,
        )
    facts = np.stack([h, r, t], axis=1)
    if n_bad:
        facts = facts[~bad_e]
        log.warning("%s: dropped %d facts whose entity never occurs in %s", path, n_bad, what)
    return facts, n_bad
