"""Where a run keeps its checkpoints: one layout, one discovery rule, pruning and ``best``.

Both execution paths (in-process :class:`~cmpnn_dist.training.context.LocalContext` and the
Ray workers' ``RayTrainContext``) and ``python -m cmpnn_dist.evaluate`` go through
:class:`CheckpointStore`.  A run folder ``<storage_root>/runs/<run_name>`` holds::

    checkpoints/step_XXXXXXXX/   one folder per checkpoint (state.pt + manifest.json)
    checkpoints/best/            a copy of the checkpoint with the highest valid MRR
    metrics.csv, tensorboard/, results.json

* **write**: the main rank writes ``write_path(step)`` with
  :func:`~cmpnn_dist.runs.checkpoint.save_checkpoint` (temp folder, fsync, manifest last,
  rename: atomic on a local or shared filesystem) and calls :meth:`commit`, which for a pyarrow
  URI (``s3://``, ``gs://``, ``file://``) uploads the files and the manifest *last*, so a
  checkpoint counts only once its manifest is there in both cases;
* **discover**: :meth:`find_latest` lists the ``step_*`` folders and ``best`` (at the step its
  manifest names) newest first and returns the first whose manifest, sizes and sha256 sums
  check out: a corrupt newest checkpoint falls back to the previous valid one, ``best``
  included, and nothing valid is deleted because a newer one is torn.  What it skipped and why
  stays in :attr:`CheckpointStore.skipped` for the run's one resume line
  (:meth:`CheckpointStore.resume_line`); ``step_N-<token>`` folders directly in the run
  folder, left by older Ray runs, are found too;
* **prune**: :meth:`prune` keeps the newest ``keep_last`` valid checkpoints (by step, read from
  the folder listing, so folders left by a killed attempt are pruned like any other) and deletes
  older valid ones and torn ones older than the newest valid one; ``best`` is never pruned;
* **best**: :meth:`update_best` replaces ``checkpoints/best`` when a checkpoint's
  ``manifest.meta.score`` beats the score in ``best/manifest.json`` (earliest wins ties); the
  copy is a real one (its own files, fsync'ed; never a hard link to the step's file, so one
  damaged file cannot take both) swapped in with a rename;
* **one writer**: only the process that holds the run lock
  (:class:`~cmpnn_dist.runs.folder.RunLock`) publishes, prunes, repairs ``best`` and
  drops interrupted writes (:meth:`publish`, :meth:`resume_point`).  Readers (``evaluate``,
  ``predict``) go through :mod:`~cmpnn_dist.runs.checkpoint_reader`, which changes nothing
  here and copes with this process pruning and replacing ``best`` beside it.

Fault drill: ``CMPNN_FAULT_BEST_DELAY_S=<seconds>`` makes :meth:`update_best` sleep that long
twice while it replaces ``best`` -- once with the new copy staged, once with the old ``best``
moved aside and the new one not yet in place -- so tests can run readers inside both windows.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmpnn_dist.storage import fs
from cmpnn_dist.storage.atomic import describe, is_fatal_os_error, write_all

from .checkpoint import (
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    fsync_dir,
    parse_checkpoint_name,
    read_manifest,
)
from .processes import still_running

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
BEST_DIR = "best"
ENV_SCRATCH = "CMPNN_SCRATCH_DIR"
ENV_BEST_DELAY = "CMPNN_FAULT_BEST_DELAY_S"
_SCRATCH = re.compile(r"^cmpnn-[a-z0-9]+-pid(\d+)-")


# ---------------------------------------------------------------------- paths and filesystems
# one storage layer for local paths and URIs (cmpnn_dist/storage/fs.py)
is_uri = fs.is_uri
filesystem = fs.filesystem
join = fs.join
_list_dirs = fs.list_dirs
_delete_dir = fs.delete_dir


def _upload(local: Path, uri: str) -> None:
    """Copy checkpoint folder ``local`` to ``uri`` (a fresh folder): the manifest last."""
    fs.delete_dir(uri)
    fs.upload_tree(local, uri, last=MANIFEST)


def _download(uri: str, local: Path) -> Path:
    return fs.download_tree(uri, local)


# ---------------------------------------------------------------------- scratch folders
def drop_dead_folders(base: Path, pattern: re.Pattern[str]) -> None:
    """Delete the folders in ``base`` whose name matches ``pattern`` (group 1: the owner's
    pid) and whose owner is gone: a process killed with SIGKILL never runs its cleanup.  A
    process that holds the pid now but began after the folder was last written is another
    one, given the pid again (``processes.still_running``), so its folder goes too."""
    for p in base.iterdir():
        m = pattern.match(p.name)
        if not m or not p.is_dir():
            continue
        try:
            written = p.stat().st_mtime
        except FileNotFoundError:  # another process dropped it first
            continue
        if not still_running(int(m.group(1)), written=written):
            shutil.rmtree(p, ignore_errors=True)


def scratch_dir(tag: str) -> Path:
    """A fresh local scratch folder ``<base>/cmpnn-<tag>-pid<PID>-XXXX``.

    ``<base>`` is ``$CMPNN_SCRATCH_DIR`` or the system temp folder.  Folders of this pattern
    whose process is gone (a worker killed with SIGKILL never runs its cleanup) are deleted
    first, so killed attempts do not leak scratch space on a node.
    """
    base = Path(os.environ.get(ENV_SCRATCH) or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    drop_dead_folders(base, _SCRATCH)
    return Path(tempfile.mkdtemp(prefix=f"cmpnn-{tag}-pid{os.getpid()}-", dir=base))


# ---------------------------------------------------------------------- the store
@dataclass
class Found:
    """A verified checkpoint: its step, URI (or local path) and a local folder holding it."""

    step: int
    uri: str
    path: Path
    manifest: dict[str, Any]


class CheckpointStore:
    """Checkpoints of one run folder (local path or pyarrow URI).

    Args:
        run: the run folder ``<storage_root>/runs/<run_name>``.
        scratch: local folder for remote checkpoints (fetched / staged); made on first use
            with :func:`scratch_dir` (``scratch_tag`` names it) and deleted by :meth:`close`.
    """

    def __init__(
        self, run: str | Path, scratch: Path | None = None, scratch_tag: str = "ckpt"
    ) -> None:
        self.run = fs.normalize(run)
        self.remote = is_uri(self.run)
        self.root = join(self.run, CHECKPOINTS_DIR)
        self.best_uri = join(self.root, BEST_DIR)
        self._scratch = scratch
        self._scratch_tag = scratch_tag
        self.skipped: list[str] = []  # find_latest: the checkpoints skipped and why
        self.dropped: list[str] = []  # resume_point: a corrupt best dropped, and why

    @property
    def scratch(self) -> Path:
        if self._scratch is None:
            self._scratch = scratch_dir(self._scratch_tag)
        self._scratch.mkdir(parents=True, exist_ok=True)
        return self._scratch

    # ------------------------------------------------------------------ discovery
    def candidates(self) -> list[tuple[int, str]]:
        """``(step, uri)`` of every checkpoint folder of the run, newest step first."""
        found = []
        for base in (self.root, self.run):  # self.run: step_N-<token> of older Ray runs
            for name in _list_dirs(base):
                step = parse_checkpoint_name(name)
                if step is not None:
                    found.append((step, join(base, name)))
        return sorted(found, reverse=True)

    def local(self, uri: str) -> Path:
        """A local folder with the checkpoint at ``uri`` (the folder itself when local)."""
        if not self.remote:
            return Path(uri)
        name = uri.rstrip("/").rsplit("/", 1)[-1]
        return _download(uri, Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.scratch)))

    def best_step(self) -> int | None:
        """The step ``checkpoints/best/manifest.json`` names (None: absent or unreadable)."""
        try:
            manifest = json.loads(fs.read_text(join(self.best_uri, MANIFEST)))
            step = manifest["step"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return int(step) if isinstance(step, int) else None

    def resume_candidates(self) -> list[tuple[int, str]]:
        """:meth:`candidates` and ``best`` (at the step its manifest names; after the step
        folders of that step; last when its manifest is unreadable), newest first."""
        found = [(step, 1, uri) for step, uri in self.candidates()]
        if fs.exists(self.best_uri):
            step = self.best_step()
            found.append((-1 if step is None else step, 0, self.best_uri))
        return [(step, uri) for step, _, uri in sorted(found, reverse=True)]

    def find_latest(self) -> Found | None:
        """The newest checkpoint, among the step folders and ``best``, whose manifest and
        sha256 sums check out (None: none).  Read-only.  Each one skipped on the way is one
        message in ``self.skipped`` (its path and why), said by the caller in one line."""
        self.skipped = []
        for step, uri in self.resume_candidates():
            local = self.local(uri)
            try:
                manifest = read_manifest(local, verify_checksums=True)
            except CheckpointError as e:
                self.skipped.append(str(e))
                logger.debug("skipping invalid checkpoint %s: %s", uri, e)
                if self.remote:
                    shutil.rmtree(local, ignore_errors=True)
                continue
            step = manifest.get("step") if isinstance(manifest.get("step"), int) else step
            return Found(step, uri, local, manifest)
        return None

    def resume_line(self, found: Found | None) -> str | None:
        """The one line a (re)start says about :meth:`find_latest`'s answer ``found``: the
        checkpoint it continues from and what it skipped and why, or that it starts afresh
        because nothing valid is left (None: a first start, nothing to say)."""
        skipped = "; ".join(self.skipped)
        if found is not None:
            line = f"resuming from step {found.step}: {found.uri}"
            if skipped:
                line += f" (the newest valid checkpoint; skipped {skipped})"
            if self.dropped:
                line += f" ({'; '.join(self.dropped)})"
            return line
        if self.skipped:
            return (
                f"no valid checkpoint in {self.root} ({len(self.skipped)} invalid, skipped: "
                f"{skipped}): starting from step 0"
            )
        return None

    # ------------------------------------------------------------------ writing
    def write_path(self, step: int) -> Path:
        """Where the main rank writes the checkpoint of ``step`` (then :meth:`commit`)."""
        if self.remote:
            return self.scratch / CHECKPOINTS_DIR / checkpoint_name(step)
        return Path(self.root) / checkpoint_name(step)

    def commit(self, local: Path) -> str:
        """Publish a complete checkpoint written at :meth:`write_path`; returns its URI."""
        if not self.remote:
            return str(local)
        uri = join(self.root, Path(local).name)
        _upload(Path(local), uri)
        return uri

    def discard_partial(self) -> list[str]:
        """Delete the temp folders of interrupted local writes (only the main rank writes)."""
        if self.remote:
            return []
        root = Path(self.root)
        if not root.is_dir():
            return []
        gone = [p for p in root.iterdir() if p.name.startswith((".tmp-", ".old-"))]
        for p in gone:
            shutil.rmtree(p, ignore_errors=True)
        return [str(p) for p in gone]

    def prune(self, keep_last: int) -> list[str]:
        """Keep the newest ``keep_last`` valid checkpoints; delete older valid ones and torn ones
        older than the newest valid one.  ``best`` is never touched.  Returns deleted URIs."""
        valid, torn = [], []
        for step, uri in self.candidates():  # newest first
            try:
                if self.remote:
                    fs, path = filesystem(join(uri, MANIFEST))
                    import pyarrow.fs as pafs

                    if fs.get_file_info(path).type != pafs.FileType.File:
                        raise CheckpointError("manifest missing")
                else:
                    read_manifest(Path(uri), verify_checksums=False)
                valid.append((step, uri))
            except CheckpointError:
                torn.append((step, uri))
        keep = {uri for _, uri in valid[: max(keep_last, 1)]}
        newest = valid[0][0] if valid else None
        removed = [uri for _, uri in valid if uri not in keep]
        removed += [uri for step, uri in torn if newest is not None and step < newest]
        for uri in removed:
            _delete_dir(uri)
        return removed

    # ------------------------------------------------------------------ best
    def best_score(self) -> float | None:
        """``meta.score`` of ``checkpoints/best`` (None when absent or unreadable)."""
        try:
            if self.remote:
                fs, path = filesystem(join(self.best_uri, MANIFEST))
                with fs.open_input_stream(path) as f:
                    manifest = json.loads(f.read().decode())
            else:
                manifest = read_manifest(Path(self.best_uri), verify_checksums=False)
        except (CheckpointError, OSError, ValueError):
            return None
        score = (manifest.get("meta") or {}).get("score")
        return float(score) if isinstance(score, (int, float)) else None

    def update_best(self, local: Path, manifest: dict[str, Any]) -> bool:
        """Make checkpoint ``local`` the ``best`` copy if its score beats the current one (a
        checkpoint with ``meta.best_is_last``, of a run that ranks no validation, always does).

        Atomic: the new copy is staged complete as ``.tmp-best-<token>`` (files copied and
        fsync'ed locally; uploaded manifest last on a URI), then ``best`` is renamed to
        ``.old-best-<token>``, the staged copy renamed to ``best`` and the old one deleted.
        A kill at any point leaves ``best`` valid or restorable: :meth:`repair_best` (run at
        every resume, by the run lock's holder only) moves the newest complete staged copy
        into place."""
        meta = manifest.get("meta") or {}
        score = meta.get("score")
        if not meta.get("best_is_last"):
            if not isinstance(score, (int, float)):
                return False
            current = self.best_score()
            if current is not None and score <= current:
                return False
        token = uuid.uuid4().hex[:8]
        tmp = join(self.root, f".tmp-best-{token}")
        old = join(self.root, f".old-best-{token}")
        try:
            if self.remote:
                _upload(Path(local), tmp)
            else:
                _copy_tree(str(local), tmp)
        except BaseException:  # a failed staging (disk full...) leaves no half copy behind
            fs.delete_dir(tmp)
            raise
        _drill_pause()
        replaced = fs.exists(self.best_uri)
        if replaced:
            fs.move(self.best_uri, old)
            _drill_pause()
        try:
            fs.move(tmp, self.best_uri)
        except BaseException:  # the old best back in place, the staged copy dropped
            if replaced:
                fs.move(old, self.best_uri)
            fs.delete_dir(tmp)
            raise
        fs.delete_dir(old)
        return True

    def _staged_best(self) -> list[str]:
        """Complete-looking staged copies of ``best``: new ones (``.tmp-best-*``) first."""
        names = [n for n in _list_dirs(self.root) if n.startswith((".tmp-best-", ".old-best-"))]
        names.sort(key=lambda n: (not n.startswith(".tmp-"), n))
        return [join(self.root, n) for n in names]

    def _verified(self, location: str) -> bool:
        return self._problem(location) is None

    def _problem(self, location: str) -> str | None:
        """Why checkpoint folder ``location`` fails its manifest / sha256 check (None: it
        passes)."""
        try:
            if self.remote:
                local = self.local(location)
                try:
                    read_manifest(local, verify_checksums=True)
                finally:
                    shutil.rmtree(local, ignore_errors=True)
            else:
                read_manifest(Path(location), verify_checksums=True)
        except (CheckpointError, OSError) as e:
            return str(e)
        return None

    def repair_best(self) -> str | None:
        """After a kill during :meth:`update_best`: when ``best`` is missing or torn, move the
        newest complete staged copy into place; staged leftovers are deleted.  Returns the
        ``best`` location when there is a valid one, else None.  Only for the process holding
        the run lock: staged copies may be another live process's work in progress."""
        staged = self._staged_best()
        best_ok = fs.is_file(join(self.best_uri, MANIFEST)) and (
            not staged or self._verified(self.best_uri)
        )
        if not best_ok:
            for candidate in staged:
                if self._verified(candidate):
                    fs.delete_dir(self.best_uri)
                    fs.move(candidate, self.best_uri)
                    logger.warning("restored %s from %s", self.best_uri, candidate)
                    best_ok = True
                    break
        for leftover in self._staged_best():
            fs.delete_dir(leftover)
        return self.best_uri if best_ok else None

    # ------------------------------------------------------------------ one sequence for all
    def publish(self, local: Path, keep_last: int) -> dict[str, Any]:
        """Publish the checkpoint just written at ``local`` (every context calls this): verify
        it, commit it (upload for a URI), update ``best``, prune.  Returns its manifest.  A
        write that cannot succeed (no space...) is one CheckpointError naming it."""
        manifest = read_manifest(local, verify_checksums=True)
        try:
            self.commit(local)
            self.update_best(local, manifest)
            self.prune(keep_last)
        except OSError as e:  # disk full, read-only...: one line naming the checkpoint
            if not is_fatal_os_error(e):
                raise
            why = describe(e, local)
            raise CheckpointError(f"cannot publish checkpoint {local}: {why}") from None
        return manifest

    def resume_point(self, resume: bool) -> Found | None:
        """The checkpoint a (re)started run continues from (every context calls this).

        Interrupted writes are dropped and ``best`` repaired; the newest valid checkpoint (a
        step folder or ``best``, :meth:`find_latest`) is offered to ``best`` again (a run
        killed between publishing a checkpoint and updating ``best`` loses nothing); a
        ``best`` that fails its sha256 check is dropped first, so a valid copy replaces it.
        None (no valid checkpoint, or ``resume`` False): the run starts fresh and ``best`` is
        dropped.  :meth:`resume_line` says which."""
        self.dropped = []
        self.repair_best()
        self.discard_partial()
        found = self.find_latest() if resume else None
        if found is None:
            self.reset()
            return None
        if found.uri != self.best_uri:
            problem = self._problem(self.best_uri) if fs.exists(self.best_uri) else None
            if problem is not None:  # worth nothing, and its score would keep a valid copy out
                _delete_dir(self.best_uri)
            copied = self.update_best(found.path, found.manifest)  # a valid copy, by score
            if problem is not None:
                then = "copied from it" if copied else "the next validated checkpoint"
                self.dropped.append(f"dropped the corrupt best: {problem}; best is {then}")
        return found

    def close(self) -> None:
        """Delete the scratch folder made by this store (if any)."""
        if self._scratch is not None and self._scratch.name.startswith("cmpnn-"):
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def reset(self) -> None:
        """A fresh start in an existing run folder: drop ``best`` and interrupted writes."""
        _delete_dir(self.best_uri)
        self.discard_partial()


def _drill_pause() -> None:
    """Sleep ``$CMPNN_FAULT_BEST_DELAY_S`` seconds (the fault drill of :meth:`update_best`)."""
    delay = os.environ.get(ENV_BEST_DELAY)
    if delay:
        time.sleep(float(delay))


_COPY_BLOCK = 1 << 24  # bytes read and written at a time by _copy_file


def _copy_tree(src: str, dst: str) -> None:
    """``dst`` as a copy of the folder ``src``: every file its own copy (never a hard link:
    one damaged file must not take ``best`` and a step checkpoint together), each file and
    folder fsync'ed.

    Not ``shutil.copytree``: that gathers its copies' failures into one ``shutil.Error``
    without an errno, so a full disk would no longer read as one."""
    os.mkdir(dst)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        target = os.path.join(dst, entry.name)
        if entry.is_dir(follow_symlinks=False):
            _copy_tree(entry.path, target)
        else:
            _copy_file(entry.path, target)
    fsync_dir(dst)


def _copy_file(src: str, dst: str) -> None:
    """Copy ``src`` to a new file ``dst`` block by block (the one positioned write,
    :func:`~cmpnn_dist.storage.atomic.write_all`) and fsync it."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with open(src, "rb") as f:
            offset = 0
            while block := f.read(_COPY_BLOCK):
                write_all(fd, block, offset)
                offset += len(block)
        os.fsync(fd)
    finally:
        os.close(fd)
