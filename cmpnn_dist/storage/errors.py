"""The exception types of the graph store and of the files it writes."""

from __future__ import annotations

from pathlib import Path

from cmpnn_dist.errors import UsageError


class StorageError(UsageError, ValueError):
    """Bad or missing dataset files, or bad input to a converter.

    The message always names the file (and line or key where there is one) and what is
    wrong, e.g. ``"/data/x/graphs/train/csr_00001.arrow: 812 bytes, manifest says 4096"``.
    """

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        super().__init__(f"{path}: {message}" if path is not None else message)


class WriteError(StorageError):
    """A file could not be written for a reason a retry cannot fix: no space left, a spent
    quota, a read-only filesystem, missing permissions (:mod:`cmpnn_dist.storage.atomic`).

    The message names the path, and for lack of space the bytes being written and the free
    space of that filesystem; nothing half-written is left at the path."""
