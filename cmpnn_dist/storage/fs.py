"""One storage layer for local paths and pyarrow URIs (``file://``, ``s3://``, ``gs://``...).

Every module that touches a run folder, a checkpoint or a dataset location goes through these
functions, which take a *location*: a local path (``str`` or ``Path``) or a URI string.  No
caller wraps a location in ``Path()`` unless :func:`local_path` says it is local: ``Path`` on
``file:///abs/x`` is the relative path ``file:/abs/x``.

* :func:`is_uri`, :func:`local_path` (the local path of a plain path or a ``file://`` URI),
  :func:`filesystem` (``(pyarrow filesystem, path inside it)``), :func:`join`, :func:`name`;
* queries: :func:`exists`, :func:`is_dir`, :func:`is_file`, :func:`list_dirs`,
  :func:`is_nonempty_dir`;
* changes: :func:`delete_dir`, :func:`move`, :func:`write_text` (atomic: temp name then rename
  locally, a full disk one error naming the file; one object published at close on an object
  store), :func:`read_text`;
* trees: :func:`upload_tree` (a local folder to a location, ``last`` written last, so a
  reader that waits for ``last`` never sees a partial copy), :func:`download_tree`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

Location = str | Path


def is_uri(location: Location) -> bool:
    return "://" in str(location)


def cache_dir() -> Path:
    """This machine's local cache folder (``$CMPNN_CACHE_DIR``, else ``~/.cache/cmpnn_dist``):
    where datasets of a non-local storage root are built or copied."""
    return Path(os.environ.get("CMPNN_CACHE_DIR", Path.home() / ".cache" / "cmpnn_dist"))


def local_path(location: Location) -> Path | None:
    """The absolute local path of a plain path or a ``file://`` URI; None for other URIs."""
    text = str(location)
    if not is_uri(text):
        return Path(text).expanduser().resolve()
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).resolve()
    return None


def normalize(location: Location) -> str:
    """A location as one canonical string: an absolute path, or the URI without a final /."""
    return str(location).rstrip("/") if is_uri(location) else str(local_path(location))


def filesystem(location: Location) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for a local path or a URI."""
    import pyarrow.fs as pafs

    if is_uri(location):
        return pafs.FileSystem.from_uri(str(location))
    return pafs.LocalFileSystem(), str(local_path(location))


def join(base: Location, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *parts])


def name(location: Location) -> str:
    return str(location).rstrip("/").rsplit("/", 1)[-1]


def _type(location: Location) -> Any:
    fs, path = filesystem(location)
    return fs.get_file_info(path).type


def exists(location: Location) -> bool:
    import pyarrow.fs as pafs

    return _type(location) != pafs.FileType.NotFound


def is_dir(location: Location) -> bool:
    import pyarrow.fs as pafs

    return _type(location) == pafs.FileType.Directory


def is_file(location: Location) -> bool:
    import pyarrow.fs as pafs

    return _type(location) == pafs.FileType.File


def list_dirs(location: Location) -> list[str]:
    """Names of the sub-folders of a folder (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def is_nonempty_dir(location: Location) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return False
    return bool(fs.get_file_info(pafs.FileSelector(path, recursive=False)))


def delete_dir(location: Location) -> None:
    """Delete a folder and everything in it (nothing when it does not exist)."""
    local = local_path(location) if not is_uri(location) else None
    if local is not None:
        shutil.rmtree(local, ignore_errors=True)
        return
    fs, path = filesystem(location)
    try:
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


def move(src: Location, dst: Location) -> None:
    """Rename ``src`` to ``dst`` (a rename on local and ``file://`` filesystems)."""
    if not is_uri(src) and not is_uri(dst):
        os.replace(local_path(src), local_path(dst))
        return
    fs, a = filesystem(src)
    _, b = filesystem(dst)
    fs.move(a, b)


def write_text(location: Location, text: str) -> None:
    """Write a small text file atomically (local: temp name then ``os.replace``; an object
    store publishes a whole object at close)."""
    local = local_path(location)
    if local is not None:
        from cmpnn_dist.storage.atomic import write_atomic

        write_atomic(local, text)
        return
    fs, path = filesystem(location)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(text.encode())


def read_text(location: Location) -> str:
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as f:
        return f.read().decode()


def upload_tree(
    local: Path, location: Location, last: str | None = None, skip: Iterable[str] = ()
) -> None:
    """Copy the files of local folder ``local`` (recursively) to ``location``; ``last`` (a
    relative file name) is written after every other file; top-level names in ``skip`` are
    left out.  A file already at the destination is overwritten."""
    fs, base = filesystem(location)
    skip = set(skip)
    files = sorted(
        p.relative_to(local).as_posix()
        for p in Path(local).rglob("*")
        if p.is_file() and p.relative_to(local).parts[0] not in skip
    )
    if last in files:
        files = [f for f in files if f != last] + [last]
    fs.create_dir(base, recursive=True)
    for rel in files:
        if "/" in rel:
            fs.create_dir(f"{base}/{rel.rsplit('/', 1)[0]}", recursive=True)
        with open(Path(local) / rel, "rb") as src, fs.open_output_stream(f"{base}/{rel}") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def download_tree(location: Location, local: Path) -> Path:
    """Copy the folder at ``location`` into local folder ``local``; returns ``local``."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    local.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(
        path, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem()
    )
    return local
