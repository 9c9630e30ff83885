"""Dataset preparation: one call, :func:`ensure_dataset`, from a config to a ready dataset folder.

``ensure_dataset(cfg)`` plans (:func:`cmpnn_dist.convert.source.plan`: use the cached copy,
rebuild it, or refuse) and, when needed, builds the Arrow dataset from ``cfg.data.source``
with :func:`cmpnn_dist.convert.build_dataset` (written into a hidden sibling folder, then
renamed).  Bad input is a :class:`~cmpnn_dist.errors.UsageError` naming the folder or key;
the CLIs (``train``, ``evaluate``, ``predict``) and the sweep call this and nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cmpnn_dist.config import Config
from cmpnn_dist.convert import SOURCES, build_dataset
from cmpnn_dist.convert.source import BuildSpec, plan
from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import fs
from cmpnn_dist.storage.errors import StorageError


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


def ensure_dataset(cfg: Config, progress: bool = True) -> Path:
    """Return the dataset folder, (re)building it from ``cfg.data.source`` when needed.

    A cached dataset is used when its recorded source (raw files: size, mtime, sha256; the
    ``data.*`` keys that shape it; the converter version) still matches; otherwise it is
    rebuilt atomically, with one line saying why.  A source that cannot be read is a
    UsageError unless ``data.allow_missing_source=true``; ``data.rebuild=true`` forces a
    rebuild.  See :mod:`cmpnn_dist.convert.source`.
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
        return path
    if todo.action == "error":
        if not d.allow_missing_source:
            raise UsageError(todo.reason)
        print(f"warning: {todo.reason.split('; ')[0]}; using the cached copy", file=sys.stderr)
        return path
    spec = todo.spec
    if spec.raw_path is not None and not Path(spec.raw_path).exists():
        hint = _MISSING_DATA_HINTS.get(spec.source, "set data.raw_path=... or data_root=...")
        raise UsageError(
            f"data for {d.name!r} not found: {spec.raw_path} does not exist "
            f"(source {spec.source}); " + hint.format(raw=spec.raw_path)
        )
    if todo.cached:
        print(f"rebuilding dataset {d.name}: {todo.reason}", file=sys.stderr)
    elif progress:
        print(f"building dataset {d.name} from {spec.source} -> {path}", file=sys.stderr)
    try:
        build(spec, path, todo.name or d.name)
    except (StorageError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
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
