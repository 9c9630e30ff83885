"""Ingestion: raw sources -> graph-store datasets (``python -m cmpnn_dist.convert``).

Sources: ``tsv:transductive``, ``tsv:inductive`` (GraIL ``X_v1`` + ``X_v1_ind``),
``ogb:biokg``, ``hetionet``, ``synthetic:rule_kg``, ``synthetic:rule_kg_inductive``,
``synthetic:trisqr``, ``synthetic:biokg_scale``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cmpnn_dist.convert.source import BuildSpec, SourceMissing, source_record
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.writer import write_dataset

SOURCES = (
    "tsv:transductive",
    "tsv:inductive",
    "ogb:biokg",
    "hetionet",
    "synthetic:rule_kg",
    "synthetic:rule_kg_inductive",
    "synthetic:trisqr",
    "synthetic:biokg_scale",
)


def convert_source(
    source: str,
    *,
    raw_path: str | Path | None = None,
    drop_unseen_entities: bool = False,
    keep_unseen_entities: bool = False,
    synthetic: dict | None = None,
    node_types: str | Path | None = None,
) -> dict[str, Any]:
    """Read/generate ``source`` into ``write_dataset`` keyword arguments (no files written)."""
    if source not in SOURCES:
        raise StorageError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    unseen = {
        "drop_unseen_entities": drop_unseen_entities,
        "keep_unseen_entities": keep_unseen_entities,
    }
    if source.startswith("synthetic:"):
        from cmpnn_dist.convert import synthetic as syn

        kind = source.split(":", 1)[1]
        if kind == "rule_kg":
            return syn.build_rule_kg(synthetic, inductive=False)
        if kind == "rule_kg_inductive":
            return syn.build_rule_kg(synthetic, inductive=True)
        if kind == "trisqr":
            return syn.build_trisqr(synthetic)
        return syn.build_biokg_scale(synthetic)
    if raw_path is None:
        raise StorageError(f"source {source} needs raw_path (the folder holding its files)")
    raw = Path(raw_path).expanduser()
    if source == "ogb:biokg":
        from cmpnn_dist.convert.ogb_biokg import convert_biokg

        return convert_biokg(raw)
    if not raw.is_dir():
        raise StorageError("no such folder", raw)
    if source == "hetionet":
        from cmpnn_dist.convert.hetionet import convert_hetionet

        return convert_hetionet(raw, **unseen)
    from cmpnn_dist.convert.tsv import convert_inductive, convert_transductive

    if source == "tsv:inductive":
        return convert_inductive(raw, node_types=node_types, **unseen)
    return convert_transductive(raw, node_types=node_types, **unseen)


def build_dataset(
    source: str,
    out_dir: str | Path,
    *,
    raw_path: str | Path | None = None,
    num_shards: int = 4,
    drop_unseen_entities: bool = False,
    synthetic: dict | None = None,
    name: str | None = None,
    keep_unseen_entities: bool = False,
    node_types: str | Path | None = None,
    origin: str = "convert",
) -> Path:
    """Convert ``source`` into a dataset folder at ``out_dir`` (atomically) and return it.

    The manifest's ``source.record`` holds what it was built from (raw files with size, mtime
    and sha256, the parameters below, the converter version; :mod:`cmpnn_dist.convert.source`).

    Args:
        source: one of :data:`SOURCES`.
        raw_path: TSV folder (``X_v1`` for the inductive layout), OGB root, Hetionet folder.
        num_shards: CSR shards per graph (balanced by edge count).
        drop_unseen_entities: transductive/inductive TSV: drop valid/test facts whose entity
            is not in the training graph (count logged and stored in the manifest's source.stats)
            instead of raising.  keep_unseen_entities: add them as isolated nodes instead
            (the usual WN18RR / FB15k-237 protocol: 40,943 / 14,541 entities).
        synthetic: generator parameters (see each generator's DEFAULTS).
        name: dataset name (default: the raw folder's name or the generator's name).
        node_types: TSV sources: ``"prefix"`` (``Kind::id`` names) or a TSV of
            ``entity<TAB>type``; None: untyped.
        origin: ``"convert"`` (the convert CLI: later opens check the dataset against this
            recorded source) or ``"config"`` (built for a train / evaluate config).
    """
    if int(num_shards) < 1:
        raise StorageError(f"num_shards must be >= 1, got {num_shards}")
    t0 = time.perf_counter()
    spec = BuildSpec.make(
        source,
        raw_path,
        num_shards=num_shards,
        drop_unseen_entities=drop_unseen_entities,
        keep_unseen_entities=keep_unseen_entities,
        node_types=node_types,
        synthetic=synthetic,
        origin=origin,
    )
    try:  # taken before the converter reads the files: an edit during it shows up next time
        record = source_record(spec) if source in SOURCES else None
    except SourceMissing:
        record = None  # the converter's own error names what is missing, and how to get it
    kwargs = convert_source(
        source,
        raw_path=raw_path,
        drop_unseen_entities=drop_unseen_entities,
        keep_unseen_entities=keep_unseen_entities,
        synthetic=synthetic,
        node_types=node_types,
    )
    if name is None and source == "ogb:biokg":
        name = "ogbl-biokg"
    if name is None:
        name = (
            Path(raw_path).name
            if raw_path is not None and not source.startswith("synthetic:")
            else source.split(":")[-1]
        )
    meta = dict(kwargs.pop("meta", {}))
    meta.update({"source": source, "convert_seconds": round(time.perf_counter() - t0, 3)})
    if record is None:  # the converter found its files after all: record them now
        record = source_record(spec)
    meta["record"] = record
    return write_dataset(out_dir, name=name, num_shards=int(num_shards), meta=meta, **kwargs)


__all__ = ["SOURCES", "build_dataset", "convert_source"]
