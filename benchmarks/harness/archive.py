"""Per-run artefacts kept in git as one compressed archive per table.

A table's cells (a sweep's checkpoints in progress, finished runs' metrics and ranks) and the
per-query ranks a figure was scored from are many small files that change together; git keeps
each set as one ``<folder>.tar.gz`` beside the figure, and the folder itself is an unpacked
working copy, ignored by git.  :func:`folder` unpacks the archive where the folder is missing
or was unpacked from another version of it (after a pull); :func:`pack` writes the archive
again after the folder changed.  Packing is deterministic (sorted names, no times or owners),
so an unchanged folder gives the same bytes and no diff.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

from cmpnn_dist.storage.atomic import write_atomic

STAMP = ".unpacked_from"  # in the folder: the sha256 of the archive it was unpacked from


def archive_of(path: Path) -> Path:
    return path.with_name(path.name + ".tar.gz")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder(path: Path) -> Path:
    """``path``, unpacked from ``path.tar.gz`` first where that archive exists and the folder
    is missing or was unpacked from other bytes."""
    tgz = archive_of(path)
    if not tgz.is_file():
        return path
    digest = _digest(tgz)
    stamp = path / STAMP
    if stamp.is_file() and stamp.read_text() == digest:
        return path
    tmp = path.with_name(f".{path.name}.unpack-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / STAMP).write_text(digest)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def pack(path: Path) -> Path:
    """Write ``path.tar.gz`` from the folder's files (whole or not at all); returns it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name != STAMP):
            if f.name.endswith(".tmp") or f.name.startswith("."):
                continue
            info = tarfile.TarInfo(f.relative_to(path).as_posix())
            info.size, info.mode = f.stat().st_size, 0o644
            with f.open("rb") as fh:
                tar.addfile(info, fh)
    tgz = archive_of(path)
    write_atomic(tgz, gzip.compress(buf.getvalue(), mtime=0))
    (path / STAMP).write_text(_digest(tgz))
    return tgz
