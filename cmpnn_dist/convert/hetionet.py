"""Hetionet v1.0 from the files hetio publishes, split as PyKEEN's ``Hetionet`` dataset.

Upstream layout (``raw_path`` folder, as in hetio/hetionet ``hetnet/tsv/``):

- ``hetionet-v1.0-edges.sif.gz`` (or the unzipped ``.sif``): tab-separated, header
  ``source<TAB>metaedge<TAB>target``, one edge a line, nodes by id (``Gene::1234``),
  metaedges by abbreviation (``CtD``);
- ``hetionet-v1.0-nodes.tsv``: header ``id<TAB>name<TAB>kind``, one node a line.

Hetionet publishes no split.  The paper's counts (1,800,157 / 225,020 / 225,020 of 2,250,197
edges) are PyKEEN's ``Hetionet`` dataset: entities = the nodes that carry an edge (45,158),
numbered by sorted id; triples de-duplicated and sorted; the coverage split of
:mod:`cmpnn_dist.convert.coverage_split` with ``random_state=0`` and ratios 0.8 / 0.1 / 0.1
(PyKEEN's second part is the test split, its third the validation split).  Node types are the
``kind`` column (11 kinds).  Entity names are the node ids (``name`` is not unique: 132 names
repeat, e.g. "Progesterone" x 3); ``keep_unseen_entities`` appends the node table's
unconnected nodes (1,873) as isolated nodes after PyKEEN's ids (47,031 in all, the node count
of the paper's table).

A folder holding ``train/valid/test.tsv`` of ``Kind::id<TAB>metaedge<TAB>Kind::id`` instead
(an existing split, header optional) is read as given, node types from the ``Kind::`` prefix.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from cmpnn_dist.convert.common import encode, encode_vocabulary, vocabulary
from cmpnn_dist.convert.coverage_split import (
    canonical_triples,
    coverage_mask,
    coverage_split,
    relation_order,
    split_sizes,
)
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.format import sha256_file
from cmpnn_dist.storage.writer import GraphSpec

HEADER = b"source\tmetaedge\ttarget"
EDGE_COLUMNS = ["source", "metaedge", "target"]
NODE_COLUMNS = ["id", "name", "kind"]
EDGES_FILES = ("hetionet-v1.0-edges.sif.gz", "hetionet-v1.0-edges.sif")
NODES_FILE = "hetionet-v1.0-nodes.tsv"
# sha256 of hetio/hetionet's hetnet/tsv/hetionet-v1.0-edges.sif.gz (its Git LFS pointer)
EDGES_SHA256 = "611f0411ac666be4e0270e54bbca67407e14720bfc3099311f0f5eec25c5a947"
PYKEEN_RATIOS = (0.8, 0.1, 0.1)


def _open(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _lines(path: Path):
    """(line number, raw line without newline) of every line, gzip or plain."""
    try:
        with _open(path) as f:
            for lineno, raw in enumerate(f, start=1):
                yield lineno, raw.rstrip(b"\r\n")
    except (OSError, EOFError) as exc:  # bad gzip stream
        raise StorageError(f"unreadable ({exc})", path) from None


def _first_bad_line(path: Path, ncols: int, optional: Sequence[int] = ()) -> tuple[int, str]:
    for lineno, line in _lines(path):
        if lineno == 1 or not line:
            continue
        fields = line.split(b"\t")
        if len(fields) != ncols:
            return lineno, f"expected {ncols} tab-separated fields, got {len(fields)}"
        empty = [i for i, x in enumerate(fields) if not x.strip() and i not in optional]
        if empty:
            return lineno, f"empty field {empty[0] + 1}"
    return -1, "unparsable"


def line_of_row(path: Path, row: int) -> int:
    """1-based line of data row ``row`` (after the header; empty lines skipped)."""
    seen = -1
    for lineno, line in _lines(path):
        if lineno == 1 or not line:
            continue
        seen += 1
        if seen == row:
            return lineno
    return -1


def read_headed_tsv(path: Path, columns: list[str], optional: Sequence[int] = ()) -> pa.Table:
    """A tab-separated file whose first line is exactly ``columns``: string table.

    Errors (StorageError naming the file): missing file, wrong header, a line with the wrong
    number of fields or an empty field (except columns ``optional``), with its line number.
    """
    if not path.is_file():
        raise StorageError("file not found", path)
    header = next(_lines(path), (1, b""))[1]
    want = "\t".join(columns).encode()
    if header != want:
        raise StorageError(f"line 1: expected the header {want!r}, got {header[:80]!r}", path)
    try:
        table = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(column_names=columns, skip_rows=1),
            parse_options=pcsv.ParseOptions(
                delimiter="\t", quote_char=False, escape_char=False, ignore_empty_lines=True
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in columns}, strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, OSError) as exc:
        lineno, why = _first_bad_line(path, len(columns), optional)
        if lineno < 0:
            raise StorageError(f"unparsable ({exc})", path) from None
        raise StorageError(f"line {lineno}: {why}", path) from None
    for i, c in enumerate(columns):
        col = table.column(c)
        if i not in optional and len(col) and pc.min(pc.binary_length(col)).as_py() == 0:
            lineno, why = _first_bad_line(path, len(columns), optional)
            raise StorageError(f"line {lineno}: {why}", path)
    return table


def edges_file(folder: Path) -> Path | None:
    for name in EDGES_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


def _missing_edges_message(folder: Path) -> str:
    msg = (
        f"no {EDGES_FILES[0]} (hetio/hetionet hetnet/tsv/, 12,401,407 bytes, sha256 "
        f"{EDGES_SHA256}) nor train/valid/test.tsv in this folder"
    )
    if (folder / f"{EDGES_FILES[0]}.LFS-POINTER.txt").is_file():
        msg += " (only its Git LFS pointer is here: fetch the real file with git lfs)"
    return msg


def pykeen_dataset(
    entity_names: pa.Array,
    node_types: np.ndarray,
    node_type_names: list[str],
    relation_names: list[str],
    triples: np.ndarray,
    *,
    ratios: Sequence[float] = PYKEEN_RATIOS,
    random_state: int = 0,
    extra_nodes: tuple[pa.Array, np.ndarray] | None = None,
) -> dict:
    """Write-dataset arguments for PyKEEN's split of ``triples`` int64 [F, 3].

    ``entity_names`` [N] must be sorted and ``relation_names`` in :func:`relation_order`, with
    every entity used by a triple (PyKEEN's ids); ``extra_nodes`` (names, types) are appended
    as isolated nodes.  Duplicate triples are dropped (counted in ``meta.stats``).
    """
    n = len(entity_names)
    canon = canonical_triples(triples, n, len(relation_names))
    parts = coverage_split(canon, n, ratios=ratios, random_state=random_state)
    if len(parts) != 3:
        raise StorageError(f"split ratios must give 3 parts (train, test, valid), got {ratios}")
    train, test, valid = parts
    names, types = entity_names, np.asarray(node_types, dtype=np.int64)
    if extra_nodes is not None and len(extra_nodes[0]):
        names = pa.concat_arrays([names, extra_nodes[0]])
        types = np.concatenate([types, np.asarray(extra_nodes[1], dtype=np.int64)])
    stats = {
        "triples": len(triples),
        "duplicates_dropped": int(len(triples) - len(canon)),
        "split_sizes_requested": list(split_sizes(len(canon), ratios)),
        "split_sizes": {"train": len(train), "valid": len(valid), "test": len(test)},
        "coverage_seed_triples": int(coverage_mask(canon, n).sum()),
        "isolated_nodes_added": len(names) - n,
    }
    spec = GraphSpec(len(names), names, types, {"train": train, "valid": valid, "test": test})
    return {
        "relation_names": list(relation_names),
        "graphs": {"train": spec},
        "inductive": False,
        "node_type_names": list(node_type_names),
        "meta": {
            "split": {
                "method": "pykeen-coverage",
                "random_state": int(random_state),
                "ratios": list(ratios),
                "parts": "train, test, valid (PyKEEN's order)",
            },
            "stats": stats,
        },
    }


def convert_upstream(
    folder: str | Path,
    *,
    keep_unseen_entities: bool = False,
    ratios: Sequence[float] = PYKEEN_RATIOS,
    random_state: int = 0,
) -> dict:
    """``folder`` with hetio's edge SIF and node TSV -> write_dataset keyword arguments."""
    folder = Path(folder)
    epath = edges_file(folder)
    if epath is None:
        raise StorageError(_missing_edges_message(folder), folder)
    npath = folder / NODES_FILE
    nodes = read_headed_tsv(npath, NODE_COLUMNS, optional=(1,))
    node_ids = nodes.column("id").combine_chunks()
    if pc.count_distinct(node_ids).as_py() != len(node_ids):
        counts = pc.value_counts(node_ids)
        dup = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))[0]
        row = pc.index(node_ids, dup).as_py()
        row2 = row + 1 + pc.index(node_ids[row + 1 :], dup).as_py()
        raise StorageError(
            f"line {line_of_row(npath, row2)}: node id {dup.as_py()!r} repeats line "
            f"{line_of_row(npath, row)}",
            npath,
        )
    edges = read_headed_tsv(epath, EDGE_COLUMNS)
    for col in ("source", "target"):
        pos = encode(edges.column(col), node_ids)
        if (pos < 0).any():
            row = int(np.flatnonzero(pos < 0)[0])
            bad = edges.column(col)[row].as_py()
            raise StorageError(
                f"line {line_of_row(epath, row)}: {col} {bad!r} is not in {npath.name}", epath
            )
    entities, (h, t) = encode_vocabulary(edges.column("source"), edges.column("target"))
    rel_names = relation_order(vocabulary(edges.column("metaedge")).to_pylist())
    r = encode(edges.column("metaedge"), pa.array(rel_names, type=pa.string()))
    kind_names = vocabulary(nodes.column("kind"))
    node_kind = encode(nodes.column("kind"), kind_names)
    types = node_kind[encode(entities, node_ids)]
    extra = None
    if keep_unseen_entities:
        unused = np.flatnonzero(encode(node_ids, entities) < 0)
        order = pc.sort_indices(node_ids.take(pa.array(unused))).to_numpy()
        extra = (node_ids.take(pa.array(unused[order])), node_kind[unused[order]])
    out = pykeen_dataset(
        entities,
        types,
        kind_names.to_pylist(),
        rel_names,
        np.stack([h, r, t], axis=1),
        ratios=ratios,
        random_state=random_state,
        extra_nodes=extra,
    )
    out["meta"].update(
        {
            "format": "hetionet-upstream",
            "raw_path": str(folder),
            "edges_file": epath.name,
            "edges_match_hetionet_v1.0": (
                epath.suffix == ".gz" and sha256_file(epath) == EDGES_SHA256
            ),
        }
    )
    out["meta"]["stats"]["node_table_rows"] = len(node_ids)
    return out


def convert_hetionet(
    folder: str | Path,
    *,
    drop_unseen_entities: bool = False,
    keep_unseen_entities: bool = False,
    ratios: Sequence[float] = PYKEEN_RATIOS,
    random_state: int = 0,
) -> dict:
    """Upstream files (see the module docstring) or, failing them, a pre-split folder.

    ``drop_unseen_entities`` only matters for a pre-split folder (the coverage split puts every
    entity in training)."""
    folder = Path(folder)
    if edges_file(folder) is not None:
        return convert_upstream(
            folder,
            keep_unseen_entities=keep_unseen_entities,
            ratios=ratios,
            random_state=random_state,
        )
    if not any((folder / f"train{ext}").is_file() for ext in (".tsv", ".txt")):
        raise StorageError(_missing_edges_message(folder), folder)
    from cmpnn_dist.convert.tsv import convert_transductive

    out = convert_transductive(
        folder,
        drop_unseen_entities=drop_unseen_entities,
        keep_unseen_entities=keep_unseen_entities,
        node_types="prefix",
        header_line=HEADER,
    )
    out["meta"]["format"] = "hetionet-presplit"
    return out
