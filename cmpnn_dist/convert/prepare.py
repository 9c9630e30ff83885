"""Dataset preparation: one call, :func:`ensure_dataset`, from a config to a ready dataset folder,
and the build it runs, :func:`build_dataset` (a raw source -> an Arrow dataset folder; also the
``python -m cmpnn_dist.convert`` CLI's).

``ensure_dataset(cfg)`` plans (:func:`cmpnn_dist.convert.source.plan`: use the cached copy,
rebuild it, or refuse) and, when needed, builds the Arrow dataset from ``cfg.data.source``
with :func:`build_dataset` (written into a hidden sibling folder, then
renamed).  Bad input is a :class:`~cmpnn_dist.errors.UsageError` naming the folder or key;
the CLIs (``train``, ``evaluate``, ``predict``) and the sweep call this and nothing else.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cmpnn_dist.config import Config
from cmpnn_dist.convert.source import BuildSpec, SourceMissing, plan, source_record
from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import fs
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.writer import write_dataset


def dataset_path(cfg: Config) -> Path:
    """``<storage_root>/datasets/<data.name>`` as a local folder (a ``file://`` root is its
    path; under another URI root the dataset is built in this machine's cache folder, which
    every worker on it reads)."""
    root = fs.local_path(cfg.storage_root)
    if root is None:
        root = fs.cache_dir()
    return root / "datasets" / cfg.data.name


_MISSING_DATA_HINTS = {
    "ogb:biokg": (
        "put OGB's ogbl_biokg folder there, so that {raw}/ogbl_biokg/split/random/train.pt "
        "exists (unzip http://snap.stanford.edu/ogb/data/linkproppred/biokg.zip and rename its "
        "biokg folder to ogbl_biokg; where there is network, ogb's loader downloads it: "
        'python -c "from ogb.linkproppred import LinkPropPredDataset as D; '
        "D('ogbl-biokg', root='{raw}')\"), or set data.raw_path=FOLDER"
    ),
    "hetionet": (
        "put hetio's hetionet-v1.0-edges.sif.gz and hetionet-v1.0-nodes.tsv there "
        "(https://github.com/hetio/hetionet, folder hetnet/tsv), or set data.raw_path=FOLDER"
    ),
}


def ensure_dataset(
    cfg: Config, progress: bool = True, check_size: Callable[[int, str], None] | None = None
) -> Path:
    """Return the dataset folder, (re)building it from ``cfg.data.source`` when needed.

    A cached dataset is used when its recorded source (raw files: size, mtime, sha256; the
    ``data.*`` keys that shape it; the converter version) still matches; otherwise it is
    rebuilt atomically, with one line saying why.  A cached dataset's files are checked
    against their sha256 before it is returned (:func:`_checked`).  A source that cannot be
    read is a UsageError unless ``data.allow_missing_source=true``; ``data.rebuild=true``
    forces a rebuild.  See :mod:`cmpnn_dist.convert.source`.

    ``check_size(n, where)``: called before a TSV source is built, with an upper bound ``n``
    on its training facts (the non-empty lines of ``where``, its training file), so that a
    graph too small to train is refused (by raising) before anything is printed or written.
    """
    d = cfg.data
    if d.source not in SOURCES:  # before anything is printed or built
        raise UsageError(f"data.source={d.source!r} is unknown; known: {', '.join(SOURCES)}")
    path = dataset_path(cfg)
    wanted = BuildSpec.make(
        d.source,
        d.raw_path,
        num_shards=d.num_shards,
        drop_unseen_entities=d.drop_unseen_entities,
        keep_unseen_entities=d.keep_unseen_entities,
        node_types=d.node_types,
        synthetic=dict(d.synthetic),
        origin="config",
    )
    try:
        todo = plan(path, wanted, force=d.rebuild)
    except (StorageError, OSError) as exc:
        raise UsageError(f"cannot check dataset {path}: {exc}") from exc
    if todo.note:
        print(todo.note, file=sys.stderr)
    if todo.action == "use":
        return _checked(path)
    if todo.action == "error":
        if not d.allow_missing_source:
            raise UsageError(todo.reason)
        print(f"warning: {todo.reason.split('; ')[0]}; using the cached copy", file=sys.stderr)
        return _checked(path)
    spec = todo.spec
    if spec.raw_path is not None and not Path(spec.raw_path).exists():
        hint = _MISSING_DATA_HINTS.get(spec.source, "set data.raw_path=... or data_root=...")
        raise UsageError(
            f"data for {d.name!r} not found: {spec.raw_path} does not exist "
            f"(source {spec.source}); " + hint.format(raw=spec.raw_path)
        )
    if check_size is not None and spec.source.startswith("tsv:") and spec.raw_path:
        from cmpnn_dist.convert.tsv import train_lines

        try:
            where, lines = train_lines(spec.raw_path)
        except (StorageError, OSError):
            pass  # no readable training file: the build names it
        else:
            check_size(lines, str(where))
    if todo.cached:
        print(f"rebuilding dataset {d.name}: {todo.reason}", file=sys.stderr)
    elif progress:
        print(f"building dataset {d.name} from {spec.source} -> {path}", file=sys.stderr)
    try:
        build(spec, path, todo.name or d.name)
    except (StorageError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
    return path


def _checked(path: Path) -> Path:
    """``path`` once every file's content matches the manifest's sha256 (once per file
    content: :mod:`cmpnn_dist.storage.integrity`); a changed file is a StorageError naming it
    and the command that rebuilds the dataset, before any run is announced."""
    from cmpnn_dist.storage.reader import open_dataset

    open_dataset(path)
    return path


def build(spec: BuildSpec, path: Path, name: str) -> Path:
    """Build ``spec`` at ``path`` atomically (written into a hidden sibling folder, then
    renamed over the old copy: :func:`cmpnn_dist.storage.writer.write_dataset`)."""
    return build_dataset(
        spec.source,
        path,
        raw_path=spec.raw_path,
        num_shards=spec.num_shards,
        drop_unseen_entities=spec.drop_unseen_entities,
        keep_unseen_entities=spec.keep_unseen_entities,
        node_types=spec.node_types,
        synthetic=dict(spec.synthetic),
        name=name,
        origin=spec.origin,
    )


SOURCES = (
    "tsv:transductive",
    "tsv:inductive",
    "ogb:biokg",
    "hetionet",
    "synthetic:rule_kg",
    "synthetic:rule_kg_inductive",
    "synthetic:trisqr",
    "synthetic:biokg_scale",
    "synthetic:biokg_rules",
    "synthetic:hetionet_schema",
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
        if kind == "biokg_rules":
            return syn.build_biokg_rules(synthetic)
        if kind == "hetionet_schema":  # raw_path: optional folder of the real node table
            return syn.build_hetionet_schema(synthetic, raw_path)
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
