"""Where a run keeps its checkpoints: one layout, one discovery rule, pruning and ``best``.

Both execution paths (in-process :class:`~cmpnn_dist.training.context.LocalContext` and the
Ray workers' ``RayTrainContext``) and ``python -m cmpnn_dist.evaluate`` go through
:class:`CheckpointStore`.  A run folder ``<storage_root>/runs/<run_name>`` holds::

    checkpoints/step_XXXXXXXX/   one folder per checkpoint (state.pt + manifest.json)
    checkpoints/best/            a copy of the checkpoint with the highest valid MRR
    metrics.csv, tensorboard/, results.json

* **write**: the main rank writes ``write_path(step)`` with
  :func:`~cmpnn_dist.training.checkpoint.save_checkpoint` (temp folder, fsync, manifest last,
  rename: atomic on a local or shared filesystem) and calls :meth:`commit`, which for a pyarrow
  URI (``s3://``, ``gs://``, ``file://``) uploads the files and the manifest *last*, so a
  checkpoint counts only once its manifest is there in both cases;
* **discover**: :meth:`find_latest` lists the ``step_*`` folders newest first and returns the
  first whose manifest, sizes and sha256 sums check out; torn ones are skipped with a warning
  naming them (``step_N-<token>`` folders directly in the run folder, left by older Ray runs,
  are found too);
* **prune**: :meth:`prune` keeps the newest ``keep_last`` valid checkpoints (by step, read from
  the folder listing, so folders left by a killed attempt are pruned like any other) and deletes
  older valid ones and torn ones older than the newest valid one; ``best`` is never pruned;
* **best**: :meth:`update_best` replaces ``checkpoints/best`` when a checkpoint's
  ``manifest.meta.score`` beats the score in ``best/manifest.json`` (earliest wins ties); on a
  local filesystem the copy is made of hard links (no extra space; checkpoint files are never
  rewritten in place) and swapped in with a rename.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint import (
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    parse_checkpoint_name,
    read_manifest,
)

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
BEST_DIR = "best"
ENV_SCRATCH = "CMPNN_SCRATCH_DIR"
_SCRATCH = re.compile(r"^cmpnn-[a-z0-9]+-pid(\d+)-")


# ---------------------------------------------------------------------- paths and filesystems
def is_uri(path: str | Path) -> bool:
    return "://" in str(path)


def filesystem(path_or_uri: str | Path) -> tuple[Any, str]:
    """``(pyarrow filesystem, path inside it)`` for a local path or a URI."""
    import pyarrow.fs as pafs

    if is_uri(path_or_uri):
        return pafs.FileSystem.from_uri(str(path_or_uri))
    return pafs.LocalFileSystem(), str(Path(path_or_uri).expanduser().resolve())


def join(base: str | Path, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *parts])


def _list_dirs(path_or_uri: str) -> list[str]:
    if not is_uri(path_or_uri):
        p = Path(path_or_uri)
        return sorted(c.name for c in p.iterdir() if c.is_dir()) if p.is_dir() else []
    import pyarrow.fs as pafs

    fs, path = filesystem(path_or_uri)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def _delete_dir(path_or_uri: str) -> None:
    if not is_uri(path_or_uri):
        shutil.rmtree(path_or_uri, ignore_errors=True)
        return
    fs, path = filesystem(path_or_uri)
    try:
        fs.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


def _upload(local: Path, uri: str) -> None:
    """Copy checkpoint folder ``local`` to ``uri``: every file, then the manifest last."""
    fs, path = filesystem(uri)
    _delete_dir(uri)
    fs.create_dir(path, recursive=True)
    names = sorted(p.name for p in local.iterdir() if p.is_file())
    for name in [n for n in names if n != MANIFEST] + [MANIFEST]:
        with open(local / name, "rb") as src, fs.open_output_stream(f"{path}/{name}") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def _download(uri: str, local: Path) -> Path:
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    local.mkdir(parents=True, exist_ok=True)
    pafs.copy_files(
        path, str(local), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem()
    )
    return local


# ---------------------------------------------------------------------- scratch folders
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def scratch_dir(tag: str) -> Path:
    """A fresh local scratch folder ``<base>/cmpnn-<tag>-pid<PID>-XXXX``.

    ``<base>`` is ``$CMPNN_SCRATCH_DIR`` or the system temp folder.  Folders of this pattern
    whose process is gone (a worker killed with SIGKILL never runs its cleanup) are deleted
    first, so killed attempts do not leak scratch space on a node.
    """
    base = Path(os.environ.get(ENV_SCRATCH) or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    for p in base.iterdir():
        m = _SCRATCH.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
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
        self.run = str(run) if is_uri(run) else str(Path(run).expanduser().resolve())
        self.remote = is_uri(self.run)
        self.root = join(self.run, CHECKPOINTS_DIR)
        self.best_uri = join(self.root, BEST_DIR)
        self._scratch = scratch
        self._scratch_tag = scratch_tag
        self.skipped: list[str] = []

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

    def find_latest(self) -> Found | None:
        """The newest checkpoint whose manifest and sha256 sums check out (None: none).

        Each torn one is skipped with ``warnings.warn`` and ``logger.warning`` naming it; the
        messages stay in ``self.skipped``.
        """
        self.skipped = []
        for step, uri in self.candidates():
            local = self.local(uri)
            try:
                manifest = read_manifest(local, verify_checksums=True)
            except CheckpointError as e:
                msg = f"skipping invalid checkpoint {uri}: {e}"
                self.skipped.append(msg)
                logger.warning(msg)
                warnings.warn(msg, stacklevel=2)
                if self.remote:
                    shutil.rmtree(local, ignore_errors=True)
                continue
            return Found(step, uri, local, manifest)
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
                    import json

                    manifest = json.loads(f.read().decode())
            else:
                manifest = read_manifest(Path(self.best_uri), verify_checksums=False)
        except (CheckpointError, OSError, ValueError):
            return None
        score = (manifest.get("meta") or {}).get("score")
        return float(score) if isinstance(score, (int, float)) else None

    def update_best(self, local: Path, manifest: dict[str, Any]) -> bool:
        """Make checkpoint ``local`` the ``best`` copy if its score beats the current one."""
        score = (manifest.get("meta") or {}).get("score")
        if not isinstance(score, (int, float)):
            return False
        current = self.best_score()
        if current is not None and score <= current:
            return False
        if self.remote:
            _upload(Path(local), self.best_uri)
            return True
        best = Path(self.best_uri)
        tmp = best.with_name(f".tmp-best-{uuid.uuid4().hex[:8]}")
        shutil.copytree(local, tmp, copy_function=_link_or_copy)
        old = best.with_name(f".old-best-{uuid.uuid4().hex[:8]}")
        if best.exists():
            os.replace(best, old)
        os.replace(tmp, best)
        shutil.rmtree(old, ignore_errors=True)
        return True

    def close(self) -> None:
        """Delete the scratch folder made by this store (if any)."""
        if self._scratch is not None and self._scratch.name.startswith("cmpnn-"):
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def reset(self) -> None:
        """A fresh start in an existing run folder: drop ``best`` and interrupted writes."""
        _delete_dir(self.best_uri)
        self.discard_partial()


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
