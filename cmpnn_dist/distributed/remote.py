"""Paths that may be local or a pyarrow filesystem URI (``s3://``, ``gs://``, ``file://``...).

* :func:`runs_root` -- where Ray Train keeps runs: ``<storage_root>/runs`` as an absolute
  local path or a URI (Ray's ``RunConfig.storage_path`` accepts both).
* :func:`localize_dataset` -- each worker memory-maps the dataset's Arrow shards; a dataset
  behind a URI is first copied once per machine into a local cache folder.
* :func:`write_text` / :func:`read_text` / :func:`list_dirs` ... -- re-exported from the one
  storage layer, :mod:`cmpnn_dist.storage.fs`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow.fs as pafs

from cmpnn_dist.storage import fs as storage_fs
from cmpnn_dist.storage.errors import StorageError

COMPLETE_MARKER = ".cmpnn-download-complete"


is_uri = storage_fs.is_uri
filesystem = storage_fs.filesystem
join = storage_fs.join
exists = storage_fs.exists
list_dirs = storage_fs.list_dirs
is_nonempty_dir = storage_fs.is_nonempty_dir
write_text = storage_fs.write_text
read_text = storage_fs.read_text


def runs_root(storage_root: str | Path) -> str:
    """``<storage_root>/runs``: an absolute path, or the URI with ``/runs`` appended."""
    return storage_fs.join(storage_fs.normalize(storage_root), "runs")


def localize_dataset(path_or_uri: str | Path, cache_dir: Path | None = None) -> Path:
    """A local folder holding the dataset at ``path_or_uri``.

    A local path is returned as is (it is memory-mapped in place, so a shared filesystem
    such as NFS needs no copy).  A URI is copied with ``pyarrow.fs.copy_files`` into
    ``<cache_dir>/datasets/<sha1(uri)[:12]>/<name>`` unless a completed copy is already
    there; the copy goes to a temp folder first and is renamed into place, so concurrent
    workers on one machine and interrupted downloads never leave a half-copied dataset.
    """
    if not storage_fs.is_uri(path_or_uri):  # memory-mapped in place
        return storage_fs.local_path(path_or_uri)
    uri = str(path_or_uri).rstrip("/")
    cache = (cache_dir or storage_fs.cache_dir()) / "datasets"
    key = hashlib.sha1(uri.encode()).hexdigest()[:12]
    target = cache / key / uri.rsplit("/", 1)[-1]
    if (target / COMPLETE_MARKER).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fs, src = pafs.FileSystem.from_uri(uri)
    if fs.get_file_info(src).type != pafs.FileType.Directory:
        raise StorageError(f"dataset {uri}: no such folder on {type(fs).__name__}")
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        pafs.copy_files(
            src, str(tmp), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem()
        )
        (tmp / COMPLETE_MARKER).write_text(uri + "\n")
        try:
            os.replace(tmp, target)
        except OSError:  # another worker finished first: use its copy
            if not (target / COMPLETE_MARKER).is_file():
                shutil.rmtree(target, ignore_errors=True)
                os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
