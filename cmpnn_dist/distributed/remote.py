"""Paths that may be local or a pyarrow filesystem URI (``s3://``, ``gs://``, ``file://``...).

* :func:`runs_root` -- where Ray Train keeps runs: ``<storage_root>/runs`` as an absolute
  local path or a URI (Ray's ``RunConfig.storage_path`` accepts both).
* :func:`localize_dataset` -- each worker memory-maps the dataset's Arrow shards; a dataset
  behind a URI is first copied once per machine into a local cache folder.
* :func:`write_text` / :func:`read_text` / :func:`list_dirs` -- small helpers over
  ``pyarrow.fs`` so the driver and the workers use one code path for every filesystem.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow.fs as pafs

from cmpnn_dist.storage.errors import StorageError

COMPLETE_MARKER = ".cmpnn-download-complete"


def is_uri(path: str | Path) -> bool:
    return "://" in str(path)


def runs_root(storage_root: str | Path) -> str:
    """``<storage_root>/runs``: an absolute path, or the URI with ``/runs`` appended."""
    root = str(storage_root)
    if is_uri(root):
        return root.rstrip("/") + "/runs"
    return str(Path(root).expanduser().resolve() / "runs")


def filesystem(path_or_uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path or a URI."""
    if is_uri(path_or_uri):
        return pafs.FileSystem.from_uri(path_or_uri)
    return pafs.LocalFileSystem(), str(Path(path_or_uri).expanduser().resolve())


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def exists(path_or_uri: str) -> bool:
    fs, path = filesystem(path_or_uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def list_dirs(path_or_uri: str) -> list[str]:
    """Names of the sub-folders of a folder (empty when it does not exist)."""
    fs, path = filesystem(path_or_uri)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def is_nonempty_dir(path_or_uri: str) -> bool:
    fs, path = filesystem(path_or_uri)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return False
    return bool(fs.get_file_info(pafs.FileSelector(path, recursive=False)))


def write_text(path_or_uri: str, text: str) -> None:
    """Write a small text file; local files go through a temp name and ``os.replace``."""
    if not is_uri(path_or_uri):
        target = Path(path_or_uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
        return
    fs, path = filesystem(path_or_uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as f:  # object stores publish a whole object at close
        f.write(text.encode())


def read_text(path_or_uri: str) -> str:
    fs, path = filesystem(path_or_uri)
    with fs.open_input_stream(path) as f:
        return f.read().decode()


def move_aside(path_or_uri: str, suffix: str) -> str:
    """Rename a folder to ``<name>.<suffix>`` (keeps old data instead of deleting it)."""
    fs, path = filesystem(path_or_uri)
    fs.move(path, f"{path}.{suffix}")
    return f"{path_or_uri}.{suffix}"


def default_cache_dir() -> Path:
    return Path(os.environ.get("CMPNN_CACHE_DIR", Path.home() / ".cache" / "cmpnn_dist"))


def localize_dataset(path_or_uri: str | Path, cache_dir: Path | None = None) -> Path:
    """A local folder holding the dataset at ``path_or_uri``.

    A local path is returned as is (it is memory-mapped in place, so a shared filesystem
    such as NFS needs no copy).  A URI is copied with ``pyarrow.fs.copy_files`` into
    ``<cache_dir>/datasets/<sha1(uri)[:12]>/<name>`` unless a completed copy is already
    there; the copy goes to a temp folder first and is renamed into place, so concurrent
    workers on one machine and interrupted downloads never leave a half-copied dataset.
    """
    if not is_uri(path_or_uri):
        return Path(path_or_uri).expanduser().resolve()
    uri = str(path_or_uri).rstrip("/")
    cache = (cache_dir or default_cache_dir()) / "datasets"
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
