"""TSV triples ``head<TAB>relation<TAB>tail``: transductive and GraIL inductive layouts.

Parsing is ``pyarrow.csv`` (multi-threaded, no per-line Python); only when it fails, or a
field is empty, a slow line scan finds the first offending line for the error message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from cmpnn_dist.convert.common import (
    dedupe,
    encode,
    encode_split,
    encode_vocabulary,
    log,
    vocabulary,
)
from cmpnn_dist.storage.csr import csr_and_duplicates
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.writer import GraphSpec

COLUMNS = ["head", "relation", "tail"]
SPLIT_FILES = ("{split}.txt", "{split}.tsv")


BLOCK_SIZE = 1 << 20  # pyarrow's CSV block: a longer line cannot be parsed


def _first_bad_line(path: Path, ncols: int = 3) -> tuple[int, str] | None:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.rstrip(b"\r\n")
            if len(line) >= BLOCK_SIZE:
                return lineno, (
                    f"a line of {len(line):,} bytes (at most {BLOCK_SIZE - 1:,}: names are "
                    "meant to be short; is this a TSV of facts?)"
                )
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != ncols:
                return lineno, f"expected {ncols} tab-separated fields, got {len(fields)}"
            if any(not x.strip() for x in fields):
                return lineno, "empty field"
    return None


def read_tsv(path: str | Path, columns: list[str] = COLUMNS, skip_header: bool = False) -> pa.Table:
    """Read a headerless tab-separated file into a table of string columns.

    Raises StorageError naming the file and line for a wrong field count or an empty field.
    """
    path = Path(path)
    if not path.is_file():
        raise StorageError("file not found", path)
    try:
        table = pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(
                column_names=columns, skip_rows=int(skip_header), block_size=BLOCK_SIZE
            ),
            parse_options=pcsv.ParseOptions(
                delimiter="\t", quote_char=False, escape_char=False, ignore_empty_lines=True
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in columns}, strings_can_be_null=False
            ),
        )
    except pa.ArrowInvalid as exc:
        bad = _first_bad_line(path, len(columns))
        if bad is None:
            raise StorageError(f"unparsable TSV ({exc})", path) from exc
        raise StorageError(f"line {bad[0]}: {bad[1]}", path) from None
    for c in columns:
        col = table.column(c)
        if len(col) and pc.min(pc.binary_length(col)).as_py() == 0:
            bad = _first_bad_line(path, len(columns))
            line = bad[0] if bad else "?"
            raise StorageError(f"line {line}: empty field ({c})", path)
    return table


def _first_line(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.readline().rstrip(b"\r\n")


def split_file(folder: Path, split: str) -> Path:
    for pattern in SPLIT_FILES:
        p = folder / pattern.format(split=split)
        if p.is_file():
            return p
    raise StorageError(f"no {split}.txt or {split}.tsv in this folder", folder)


def train_lines(folder: str | Path) -> tuple[Path, int]:
    """The training file of TSV folder ``folder`` and its number of non-empty lines: an upper
    bound on its training facts (conversion drops duplicates), counted without parsing."""
    path = split_file(Path(folder), "train")
    with open(path, "rb") as f:
        return path, sum(1 for line in f if line.strip())


def node_types_for(
    entities: pa.Array, node_types: str | Path | None
) -> tuple[np.ndarray | None, list[str]]:
    """Node types of ``entities``: None, ``"prefix"`` (``Kind::id`` names) or a TSV path
    of ``entity<TAB>type`` lines.  Returns (int64 [N] or None, sorted type names)."""
    if node_types is None:
        return None, []
    if str(node_types) == "prefix":
        parts = pc.split_pattern(entities, "::", max_splits=1)
        has = pc.greater(pc.list_value_length(parts), 1)
        if len(entities) and not pc.all(has).as_py():
            bad = entities[pc.index(has, False).as_py()].as_py()
            raise StorageError(
                f"entity {bad!r} has no 'Kind::' prefix (node types from name prefixes)"
            )
        kinds = pc.list_element(parts, 0)
    else:
        path = Path(node_types)
        table = read_tsv(path, ["entity", "type"])
        idx = pc.index_in(entities, value_set=table.column("entity").combine_chunks())
        if idx.null_count:
            bad = entities[pc.index(pc.is_null(idx), True).as_py()].as_py()
            raise StorageError(f"entity {bad!r} has no line in the node-type file", path)
        kinds = pc.take(table.column("type").combine_chunks(), idx)
    names = vocabulary(kinds)
    ids = pc.index_in(kinds, value_set=names).to_numpy(zero_copy_only=False).astype(np.int64)
    return ids, names.to_pylist()


def encode_graph(
    folder: Path,
    relations: pa.Array,
    tables: dict[str, tuple[Path, pa.Table]],
    *,
    unseen: str,
    what: str,
    headers: frozenset[str] = frozenset(),
    train_relation_ids: np.ndarray | None = None,
) -> tuple[pa.Array, dict[str, np.ndarray], dict[str, dict[str, int]], tuple | None]:
    """Entities (from train, plus valid/test ones when ``unseen == "keep"``), int facts,
    stats, and the training CSR when it could be computed on the way (else None).

    ``headers``: the splits whose file starts with a header line (for line numbers)."""
    vocab_splits = [s for s in tables if s == "train" or unseen == "keep"]
    cols = [tables[s][1].column(c) for s in vocab_splits for c in ("head", "tail")]
    entities, ids = encode_vocabulary(*cols)
    known = {s: (ids[2 * i], ids[2 * i + 1]) for i, s in enumerate(vocab_splits)}
    facts, stats = {}, {"duplicates_dropped": {}, "unseen_entity_facts_dropped": {}}
    csr = None
    for split, (path, table) in tables.items():
        kn = None
        if split in known:
            if split == "train" and train_relation_ids is not None:
                rids = train_relation_ids
            else:
                rids = encode(table.column("relation"), relations)
            kn = (known[split][0], rids, known[split][1])
        f, dropped = encode_split(
            path,
            table,
            entities,
            relations,
            allow_unseen=unseen,
            skip_header=split in headers,
            what=what,
            known_ids=kn,
        )
        if split == "train":  # one sort gives the CSR and tells whether duplicates exist
            indptr, src, rel, dups = csr_and_duplicates(len(entities), len(relations), f)
            if dups:
                f, dups = dedupe(f, len(entities), len(relations))
            else:
                csr = (indptr, src, rel)
        else:
            f, dups = dedupe(f, len(entities), len(relations))
        if dups:
            log.warning("%s: dropped %d duplicate facts", path, dups)
        facts[split] = f
        stats["duplicates_dropped"][split] = dups
        stats["unseen_entity_facts_dropped"][split] = dropped
    return entities, facts, stats, csr


def _unseen_mode(drop: bool, keep: bool) -> str:
    if drop and keep:
        raise StorageError("drop_unseen_entities and keep_unseen_entities exclude each other")
    return "drop" if drop else "keep" if keep else "error"


def convert_transductive(
    folder: str | Path,
    *,
    drop_unseen_entities: bool = False,
    keep_unseen_entities: bool = False,
    node_types: str | Path | None = None,
    header_line: bytes | None = None,
) -> dict:
    """``folder/{train,valid,test}.txt`` -> write_dataset keyword arguments (one graph).

    ``header_line``: a first line equal to it is skipped (e.g. Hetionet's column header)."""
    folder = Path(folder)
    unseen = _unseen_mode(drop_unseen_entities, keep_unseen_entities)
    paths = {s: split_file(folder, s) for s in ("train", "valid", "test")}
    headers = frozenset(
        s for s, p in paths.items() if header_line is not None and _first_line(p) == header_line
    )
    tables = {s: (p, read_tsv(p, skip_header=s in headers)) for s, p in paths.items()}
    relations, (rel_ids,) = encode_vocabulary(tables["train"][1].column("relation"))
    entities, facts, stats, csr = encode_graph(
        folder,
        relations,
        tables,
        unseen=unseen,
        what=f"the training file {tables['train'][0]}",
        headers=headers,
        train_relation_ids=rel_ids,
    )
    types, type_names = node_types_for(entities, node_types)
    graph = GraphSpec(len(entities), entities, types, facts, csr)
    return {
        "relation_names": relations.to_pylist(),
        "graphs": {"train": graph},
        "inductive": False,
        "node_type_names": type_names,
        "meta": {"raw_path": str(folder), "unseen_entities": unseen, "stats": stats},
    }


def convert_inductive(
    folder: str | Path,
    *,
    drop_unseen_entities: bool = False,
    keep_unseen_entities: bool = False,
    node_types: str | Path | None = None,
) -> dict:
    """GraIL layout: ``X_v1`` (training graph) and its sibling ``X_v1_ind`` (test graph).

    Relations come from ``X_v1/train.txt``; a relation anywhere else that is not among them is
    an error.  Each graph's entities come from its own ``train.txt``.
    """
    folder = Path(folder)
    ind = folder.parent / f"{folder.name}_ind"
    if not ind.is_dir():
        raise StorageError(
            f"inductive layout needs the test graph folder {ind.name} next to it", folder
        )
    unseen = _unseen_mode(drop_unseen_entities, keep_unseen_entities)
    graphs, type_names, stats = {}, None, {}
    relations, rel_ids = None, None
    for gname, d in (("train", folder), ("test", ind)):
        tables = {
            s: (p, read_tsv(p)) for s in ("train", "valid", "test") for p in [split_file(d, s)]
        }
        if relations is None:
            relations, (rel_ids,) = encode_vocabulary(tables["train"][1].column("relation"))
            train_file = tables["train"][0]
        entities, facts, st, csr = encode_graph(
            d,
            relations,
            tables,
            unseen=unseen,
            what=f"the training graph's {train_file}"
            if gname == "train"
            else f"{train_file} (relations) / {tables['train'][0]} (entities)",
            train_relation_ids=rel_ids if gname == "train" else None,
        )
        types, names = node_types_for(entities, node_types)
        if type_names is not None and names != type_names and types is not None:
            # align type ids of the test graph with the training graph's table
            all_names = sorted(set(type_names) | set(names))
            remap = np.array([all_names.index(x) for x in names], dtype=np.int64)
            types, names = remap[types], all_names
            graphs["train"].node_types = np.array([all_names.index(x) for x in type_names])[
                graphs["train"].node_types
            ]
        type_names = names
        graphs[gname] = GraphSpec(len(entities), entities, types, facts, csr)
        stats[gname] = st
    return {
        "relation_names": relations.to_pylist(),
        "graphs": graphs,
        "inductive": True,
        "node_type_names": type_names or [],
        "meta": {
            "raw_path": str(folder),
            "test_graph_path": str(ind),
            "unseen_entities": unseen,
            "stats": stats,
        },
    }
