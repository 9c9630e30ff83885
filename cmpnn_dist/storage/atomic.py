"""Local files written whole, and a write that cannot succeed as one error naming the path.

A full disk (``ENOSPC``), a spent quota (``EDQUOT``), a read-only filesystem or missing
permissions fail every retry, so they are user errors: :func:`write_error` builds the one
:class:`~cmpnn_dist.storage.errors.WriteError` for them, naming the path, and for lack of
space the bytes being written and the free space of that filesystem, e.g.::

    /runs/x/results.json: cannot write: no space left on device writing 1,234 bytes (0 bytes
    free on its filesystem); free space, then rerun the same command (a training run resumes
    from its newest checkpoint)

* :func:`write_atomic` writes bytes or text under a temporary sibling name
  (``.<name>.tmp-<pid>-<id>``), then renames it over ``path``; on any failure the temporary
  file is removed, so ``path`` holds the old content or the new, never half of it.
* :func:`append_text` appends to a file; on failure the file is cut back to its old size.
* :func:`write_all` is the one positioned write (``os.pwrite``) underneath them all.
* :func:`failing_writes` turns such an OSError raised inside its block into the WriteError.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cmpnn_dist.storage.errors import WriteError

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
# a write failing with one of these cannot succeed on retry
FATAL_ERRNOS = NO_SPACE | {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
RETRY_HINT = "rerun the same command (a training run resumes from its newest checkpoint)"


def is_fatal_os_error(exc: BaseException) -> bool:
    """True for an OSError that a retry cannot fix (disk full, quota, read-only, permission)."""
    return isinstance(exc, OSError) and exc.errno in FATAL_ERRNOS


def free_bytes(path: str | Path) -> int | None:
    """Free bytes (for an unprivileged user) of the filesystem holding ``path`` or its nearest
    existing parent; None when it cannot be asked."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def human_bytes(n: int) -> str:
    """``1,234 bytes`` below 1 MiB, ``12.3 MiB`` below 1 GiB, else ``4.5 GiB``."""
    if n < 2**20:
        return f"{n:,} bytes"
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


def describe(exc: OSError, path: str | Path, nbytes: int | None = None) -> str:
    """What went wrong writing ``nbytes`` to ``path`` and what to do, as one phrase."""
    if exc.errno in NO_SPACE:
        what = "no space left on device" if exc.errno == errno.ENOSPC else "disk quota exceeded"
        size = f" writing {human_bytes(nbytes)}" if nbytes is not None else ""
        free = free_bytes(path)
        room = "" if free is None else f" ({human_bytes(free)} free on its filesystem)"
        return f"{what}{size}{room}; free space, then {RETRY_HINT}"
    reason = exc.strerror or str(exc)
    return f"{reason}; fix the folder's permissions or pick another storage_root"


def write_error(exc: OSError, path: str | Path, nbytes: int | None = None) -> WriteError:
    """The one-line error for an OSError that :func:`is_fatal_os_error` calls fatal."""
    return WriteError(f"cannot write: {describe(exc, path, nbytes)}", path)


@contextmanager
def failing_writes(path: str | Path, nbytes: int | None = None) -> Iterator[None]:
    """Inside the block, an OSError a retry cannot fix becomes :func:`write_error`."""
    try:
        yield
    except OSError as exc:
        if not is_fatal_os_error(exc):
            raise
        raise write_error(exc, path, nbytes) from None


def write_all(fd: int, data: bytes | memoryview, offset: int = 0) -> None:
    """Write every byte of ``data`` at ``offset`` of ``fd`` (``os.pwrite``; a short write is
    continued where it stopped)."""
    view = memoryview(data).cast("B")
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def write_atomic(path: str | Path, data: bytes | str, fsync: bool = False) -> Path:
    """Write ``data`` (str: UTF-8) to ``path`` whole: temporary sibling, then rename.

    ``fsync`` flushes the file to disk before the rename.  A failure removes the temporary
    file and leaves ``path`` as it was; a fatal OSError (no space, read-only...) is a
    :class:`WriteError` naming ``path``."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with failing_writes(path, len(raw)):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_all(fd, raw)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return path


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` to ``path`` (one writer at a time: the run's); when the write fails the
    file is cut back to its size before the call (no half line is left), and a fatal OSError
    is a WriteError."""
    path = Path(path)
    raw = text.encode()
    with failing_writes(path, len(raw)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, raw, size)
            except BaseException:
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
