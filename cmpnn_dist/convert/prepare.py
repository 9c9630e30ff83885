"""Dataset preparation: one call, :func:`ensure_dataset`, from a config to a ready dataset folder,
and the build it runs, :func:`build` (a :class:`~cmpnn_dist.convert.sources.BuildSpec` -> an
Arrow dataset folder; :func:`build_dataset` makes the spec from keyword arguments for the
``python -m cmpnn_dist.convert`` CLI and scripts).

``ensure_dataset(cfg)`` plans (:func:`cmpnn_dist.convert.provenance.plan`: use the cached copy,
rebuild it, or refuse) and, when needed, builds the Arrow dataset from ``cfg.data.source``
(its registered :mod:`~cmpnn_dist.convert.sources` entry) with :func:`build` (written into a
hidden sibling folder, then renamed).  Bad input is a :class:`~cmpnn_dist.errors.UsageError`
naming the folder or key; the CLIs (``train``, ``evaluate``, ``predict``) and the sweep call
this and nothing else.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from cmpnn_dist.config import Config
from cmpnn_dist.convert import sources
from cmpnn_dist.convert.provenance import SourceMissing, plan, source_record
from cmpnn_dist.convert.sources import BuildSpec
from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import fs
from cmpnn_dist.storage.atomic import is_fatal_os_error, write_error
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


def ensure_dataset(
    cfg: Config, progress: bool = True, check_size: Callable[[int, str], None] | None = None
) -> Path:
    """Return the dataset folder, (re)building it from ``cfg.data.source`` when needed.

    A cached dataset is used when its recorded source (raw files: size, mtime, sha256; the
    ``data.*`` keys that shape it; the converter version) still matches; otherwise it is
    rebuilt atomically, with one line saying why.  A cached dataset's files are checked
    against their sha256 before it is returned (:func:`_checked`).  A source that cannot be
    read is a UsageError unless ``data.allow_missing_source=true``; ``data.rebuild=true``
    forces a rebuild.  See :mod:`cmpnn_dist.convert.provenance`.

    ``check_size(n, where)``: called before a TSV source is built, with an upper bound ``n``
    on its training facts (the non-empty lines of ``where``, its training file), so that a
    graph too small to train is refused (by raising) before anything is printed or written.
    """
    d = cfg.data
    if d.source not in sources.names():  # before anything is printed or built
        known = ", ".join(sources.names())
        raise UsageError(f"data.source={d.source!r} is unknown; known: {known}")
    path = dataset_path(cfg)
    wanted = spec_for(cfg)
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
    source = sources.get(spec.source)
    if spec.raw_path is not None and not Path(spec.raw_path).exists():
        raise UsageError(
            f"data for {d.name!r} not found: {spec.raw_path} does not exist "
            f"(source {spec.source}); " + source.missing_hint.format(raw=spec.raw_path)
        )
    if check_size is not None and source.train_lines is not None and spec.raw_path:
        try:
            where, lines = source.train_lines(Path(spec.raw_path))
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


def spec_for(cfg: Config) -> BuildSpec:
    """The build of ``cfg.data``: its ``data.*`` keys as one :class:`BuildSpec`."""
    d = cfg.data
    return BuildSpec.make(
        d.source,
        d.raw_path,
        num_shards=d.num_shards,
        drop_unseen_entities=d.drop_unseen_entities,
        keep_unseen_entities=d.keep_unseen_entities,
        node_types=d.node_types,
        synthetic=dict(d.synthetic),
        origin="config",
    )


def build(spec: BuildSpec, out_dir: str | Path, name: str) -> Path:
    """Convert ``spec`` into a dataset folder named ``name`` at ``out_dir`` (written into a
    hidden sibling folder, then renamed over the old copy:
    :func:`cmpnn_dist.storage.writer.write_dataset`) and return it.

    The manifest's ``source.record`` holds what it was built from (raw files with size, mtime
    and sha256, the spec's parameters, the converter version; :mod:`cmpnn_dist.convert.provenance`),
    taken before the source reads its files, so an edit during the conversion shows next time.
    """
    if spec.num_shards < 1:
        raise StorageError(f"num_shards must be >= 1, got {spec.num_shards}")
    source = sources.get(spec.source)
    if source.raw_path == "required" and spec.raw_path is None:
        raise StorageError(f"source {spec.source} needs raw_path (the folder holding its files)")
    t0 = time.perf_counter()
    try:
        record = source_record(spec)
    except SourceMissing:
        record = None  # the converter's own error names what is missing, and how to get it
    kwargs = source.convert(spec)
    meta = dict(kwargs.pop("meta", {}))
    meta.update({"source": spec.source, "convert_seconds": round(time.perf_counter() - t0, 3)})
    if record is None:  # the converter found its files after all: record them now
        record = source_record(spec)
    meta["record"] = record
    try:
        return write_dataset(out_dir, name=name, num_shards=spec.num_shards, meta=meta, **kwargs)
    except OSError as exc:  # a full disk, read-only...: one line naming the dataset being built
        if not is_fatal_os_error(exc):
            raise
        raise write_error(exc, out_dir) from None  # the half-built copy is already gone


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
    """:func:`build` of the :class:`BuildSpec` these arguments make (the convert CLI's and
    scripts' entry point); returns the dataset folder.

    Args:
        source: a registered source (:func:`cmpnn_dist.convert.sources.names`).
        raw_path: TSV folder (``X_v1`` for the inductive layout), OGB root, Hetionet folder.
        num_shards: CSR shards per graph (balanced by edge count).
        drop_unseen_entities: transductive/inductive TSV: drop valid/test facts whose entity
            is not in the training graph (count logged and stored in the manifest's source.stats)
            instead of raising.  keep_unseen_entities: add them as isolated nodes instead
            (the usual WN18RR / FB15k-237 protocol: 40,943 / 14,541 entities).
        synthetic: generator parameters (see each generator's DEFAULTS).
        name: dataset name (default: the source's, else the raw folder's name or the
            generator's name).
        node_types: TSV sources: ``"prefix"`` (``Kind::id`` names) or a TSV of
            ``entity<TAB>type``; None: untyped.
        origin: ``"convert"`` (the convert CLI: later opens check the dataset against this
            recorded source) or ``"config"`` (built for a train / evaluate config).
    """
    if int(num_shards) < 1:
        raise StorageError(f"num_shards must be >= 1, got {num_shards}")
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
    return build(spec, out_dir, name or sources.get(source).dataset_name(raw_path))
