"""Atomic, checksummed checkpoint directories.

A checkpoint is a directory ``<root>/step_XXXXXXXX`` (the one name pattern of both the
in-process and the Ray path; ``step_XXXXXXXX-<token>`` folders written by older Ray runs are
still found) holding::

    state.pt        torch.save of the training state (plain containers and tensors only,
                    loadable with ``weights_only=True``)
    manifest.json   {"format_version", "step", "epoch", "meta", "files": {name: {"sha256", "size"}}}

Writing: the state is serialized in memory first (so its size is known before a byte is
written), then the files go into a hidden temporary sibling ``.tmp-<name>-*``, each is
fsync'ed, ``manifest.json`` is written *last*, and the directory is renamed into place with
``os.replace``.  A checkpoint therefore counts only once its manifest is complete; a directory
without a readable manifest, or whose files do not match it (size, sha256), is *torn*:
the store's discovery (:meth:`~cmpnn_dist.runs.checkpoint_store.CheckpointStore.find_latest`,
the one rule) skips it, falls back to the previous valid one (``best`` included) and the run's
one resume line names what it skipped and why.  A write that fails at any point (a file, the
fsync of a file or of a folder, the rename) because the disk is full, read-only or not
writable raises one :class:`CheckpointError` (a user error: retrying cannot help) naming the
checkpoint, the bytes it needs and the free space of its filesystem; the
temporary folder is removed and the previous checkpoints are untouched.

Run-level logic (where a run keeps its checkpoints, the ``best`` copy, pruning, local folders
and pyarrow URIs alike) lives in :mod:`cmpnn_dist.runs.checkpoint_store`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import torch

from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage.atomic import describe, write_all
from cmpnn_dist.storage.atomic import is_fatal_os_error as is_fatal_os_error  # re-exported

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
STATE_FILE = "state.pt"
_NAME = re.compile(r"^step_(\d+)(?:-[0-9a-z]+)?$")


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint of ``step``: ``step_XXXXXXXX``."""
    return f"step_{int(step):08d}"


def parse_checkpoint_name(name: str) -> int | None:
    """The step of a checkpoint folder name (``step_N`` or legacy ``step_N-<token>``), else None."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


class CheckpointError(UsageError, RuntimeError):
    """A checkpoint is missing, torn or corrupt; the message names the offending file."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fsync_dir(path: str | Path) -> None:
    """Flush folder ``path``'s entries (its renames) to disk.  A filesystem that cannot fsync
    a folder (``EINVAL``...) is no error; a full disk or a read-only filesystem
    (:func:`is_fatal_os_error`) is: the OSError is raised, and the caller names what it was
    writing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        if is_fatal_os_error(e):
            raise
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if is_fatal_os_error(e):
            raise
    finally:
        os.close(fd)


def save_checkpoint(dir: Path, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Path:
    """Write ``state`` as checkpoint directory ``dir`` atomically; returns ``dir``.

    ``state["step"]`` and ``state["epoch"]`` (when present) are copied into the manifest, and
    ``meta`` (JSON-serialisable, e.g. ``{"score": valid_mrr}``) is stored there for pruning.
    An existing ``dir`` is replaced.  The serialized state is held in memory while it is
    written (one extra copy of the checkpoint's size).
    """
    dir = Path(dir)
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getbuffer()
    manifest = {
        "format_version": FORMAT_VERSION,
        "step": state.get("step"),
        "epoch": state.get("epoch"),
        "meta": meta or {},
        "files": {STATE_FILE: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}},
    }
    text = json.dumps(manifest, indent=1).encode()
    stage = ["its temporary folder"]
    try:
        return _save(dir, data, text, stage)
    except OSError as e:
        if is_fatal_os_error(e):
            need = len(data) + len(text)
            raise CheckpointError(
                f"cannot write checkpoint {dir} (failed at {stage[0]}): "
                f"{describe(e, dir.parent, need)}"
            ) from None
        raise


def _write_file(path: Path, data: bytes | memoryview) -> None:
    """Create ``path`` with ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(dir: Path, data: memoryview, manifest: bytes, stage: list[str]) -> Path:
    """Write the files into a temporary sibling, then rename it to ``dir``; ``stage[0]``
    names the step under way (for the error message)."""
    parent = dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{dir.name}-", dir=parent))
    old: Path | None = None
    placed = False
    try:
        stage[0] = STATE_FILE
        _write_file(tmp / STATE_FILE, data)
        stage[0] = MANIFEST
        _write_file(tmp / MANIFEST, manifest)
        stage[0] = "the fsync of its folder"
        fsync_dir(tmp)
        stage[0] = "the rename into place"
        if dir.exists():
            old = parent / f".old-{dir.name}-{uuid.uuid4().hex[:8]}"
            os.replace(dir, old)
        os.replace(tmp, dir)
        placed = True
        stage[0] = f"the fsync of {parent}"
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if placed:  # renamed, but the rename may not be on disk: take it back
            shutil.rmtree(dir, ignore_errors=True)
        if old is not None and not dir.exists():
            os.replace(old, dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dir


def read_manifest(dir: Path, verify_checksums: bool = True) -> dict[str, Any]:
    """Read and check ``dir/manifest.json`` against the files; raises CheckpointError."""
    dir = Path(dir)
    mpath = dir / MANIFEST
    if not mpath.is_file():
        raise CheckpointError(f"{mpath}: manifest missing (checkpoint incomplete)")
    manifest = parse_manifest(mpath.read_bytes(), mpath)
    for name, info in manifest["files"].items():
        fpath = dir / name
        if not fpath.is_file():
            raise CheckpointError(f"{fpath}: listed in the manifest but missing")
        size = fpath.stat().st_size
        if size != info["size"]:
            raise CheckpointError(
                f"{fpath}: size {size} bytes, manifest says {info['size']} (truncated?)"
            )
        if verify_checksums and _sha256(fpath) != info["sha256"]:
            raise CheckpointError(f"{fpath}: sha256 does not match the manifest (corrupt)")
    return manifest


def parse_manifest(text: str | bytes, mpath: Path) -> dict[str, Any]:
    """The manifest whose content is ``text`` (read from ``mpath``, named in errors): its
    ``files`` and ``format_version`` checked; raises CheckpointError."""
    try:
        manifest = json.loads(text)
        files = manifest["files"]
        version = manifest["format_version"]
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{mpath}: unreadable manifest ({e})") from None
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{mpath}: format_version {version}, expected {FORMAT_VERSION}")
    return manifest


def load_checkpoint(dir: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Verify ``dir`` (manifest, sizes, sha256) and return the saved state dict."""
    dir = Path(dir)
    read_manifest(dir, verify_checksums=True)
    path = dir / STATE_FILE
    with open(path, "rb") as f:
        return load_state(f, path, map_location)


def load_state(f: BinaryIO, path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """``torch.load`` of an open ``state.pt`` (``path`` names it in errors) with safe loading
    (``weights_only=True``); any failure is one CheckpointError line."""
    try:
        with warnings.catch_warnings():
            # torch warns about a pickle protocol other than its own before refusing or
            # loading the file; the outcome is reported below (or the load succeeds)
            warnings.filterwarnings("ignore", message="Detected pickle protocol", module="torch")
            return torch.load(f, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a corrupt file
        import pickle

        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        first = lines[0] if lines else type(e).__name__
        if isinstance(e, pickle.UnpicklingError):  # weights_only refused an object
            first = (
                "refused: it holds objects that safe loading (torch.load weights_only=True) "
                "does not accept -- not a checkpoint written by cmpnn_dist, or altered"
            )
        raise CheckpointError(f"{path}: cannot be loaded ({type(e).__name__}: {first})") from None


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint folder directly under ``root``, oldest first
    (several folders of one step, only in legacy Ray runs: by name)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        step = parse_checkpoint_name(p.name)
        if step is not None and p.is_dir():
            found.append((step, p))
    return sorted(found)
