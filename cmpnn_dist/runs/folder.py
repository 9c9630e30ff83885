"""Where runs live: the storage root, the run folder's life cycle, and the run's first lines.

``storage_root`` (datasets under ``<root>/datasets``, runs under ``<root>/runs``) is resolved
once, in the process that parses the command line, to an absolute path (or a pyarrow URI,
kept as is), and only that absolute value reaches Ray workers:

1. ``storage_root=...`` on the command line or in a preset, when given;
2. else ``$CMPNN_STORAGE_ROOT``;
3. else ``./storage`` in the working directory -- except inside a job started with
   ``ray job submit --working-dir``: its working directory is a copy in Ray's temporary session
   folder that vanishes with the cluster, so the default there is ``~/cmpnn_dist/storage``
   (the head node's home), and a *relative* ``storage_root`` is an error.

For multi-node clusters the storage root must be visible from every node (a shared
filesystem or a URI such as ``s3://bucket/cmpnn``), as for Ray Train's ``storage_path``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cmpnn_dist.config import ENV_STORAGE_ROOT, default_storage_root  # noqa: F401 (re-export)
from cmpnn_dist.config.environment import in_ray_working_dir
from cmpnn_dist.storage import fs
from cmpnn_dist.storage.atomic import failing_writes, write_all
from cmpnn_dist.storage.errors import StorageError

from .checkpoint_store import CheckpointStore, _delete_dir, filesystem, is_uri
from .processes import identity, still_running
from .writer_lock import LOCK_FILE, WRITER_FILE, wait_for_writer

ENV_MIN_FREE_MB = "CMPNN_MIN_FREE_MB"
DEFAULT_MIN_FREE_MB = 64


def resolve_storage_root(value: str) -> str:
    """``value`` as an absolute path (or URI); a relative path inside a Ray job is an error."""
    if is_uri(value):
        return value.rstrip("/")
    path = Path(value).expanduser()
    if not path.is_absolute() and in_ray_working_dir():
        raise StorageError(
            f"storage_root={value} is relative and this job runs in Ray's temporary working "
            f"dir {Path.cwd()}, which vanishes with the cluster; give an absolute path on a "
            f"filesystem every node sees, or set {ENV_STORAGE_ROOT}"
        )
    return str(path.resolve())


def check_storage_root(root: str) -> None:
    """Fail fast (StorageError, one line) when runs cannot be written under ``root``:
    not a directory, not writable (read-only filesystem, permissions) or nearly full
    (less than ``$CMPNN_MIN_FREE_MB``, default 64 MB, free)."""
    if is_uri(root):
        try:
            filesystem(root)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for bad URIs
            raise StorageError(f"storage_root={root}: {e}") from None
        return
    path = Path(root)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise StorageError(f"storage_root={root}: {existing} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".cmpnn-write-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise StorageError(
            f"storage_root={root} is not writable ({e.strerror or e}); "
            f"pick another storage_root or set {ENV_STORAGE_ROOT}"
        ) from None
    need = float(os.environ.get(ENV_MIN_FREE_MB, DEFAULT_MIN_FREE_MB))
    free = shutil.disk_usage(path).free / 2**20
    if free < need:
        raise StorageError(
            f"storage_root={root}: only {free:.0f} MB free, need at least {need:.0f} MB "
            f"({ENV_MIN_FREE_MB}); free space or pick another storage_root"
        )


def default_run_name(cfg: Any) -> str:
    """The run's name: ``cfg.run_name``, else ``<data.name>-<YYYYmmdd-HHMMSS>`` (now).  The one
    rule for every way a run starts (the command line, the Ray driver, ``fit`` called
    directly)."""
    return cfg.run_name or f"{cfg.data.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_folder(storage_root: str, run_name: str) -> str:
    """``<storage_root>/runs/<run_name>`` (a path or a URI)."""
    return f"{storage_root.rstrip('/')}/runs/{run_name}"


def exists(path_or_uri: str) -> bool:
    return fs.exists(path_or_uri)


def is_nonempty_dir(path_or_uri: str) -> bool:
    """True when the folder holds anything besides a run lock (``.lock``)."""
    import pyarrow.fs as pafs

    fsys, path = filesystem(path_or_uri)
    if fsys.get_file_info(path).type != pafs.FileType.Directory:
        return False
    infos = fsys.get_file_info(pafs.FileSelector(path, recursive=False))
    return any(i.base_name not in (LOCK_FILE, WRITER_FILE) for i in infos)


def move_aside(run: str) -> str:
    """Rename run folder ``run`` to ``<run>.replaced-<time>`` (nothing is deleted)."""
    target = f"{run.rstrip('/')}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while exists(target):
        n += 1
        target = f"{run.rstrip('/')}.replaced-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    fs.move(run, target)
    return target


def remove_failed_start(run: str, existed_before: bool) -> bool:
    """After a failed start: delete the run folder if this start created it and it holds no
    checkpoint (nothing there can be resumed).  Returns True when it was deleted."""
    if existed_before or not exists(run):
        return False
    if CheckpointStore(run).candidates():
        return False
    _delete_dir(run)
    return True


# what a run writes itself: readers (evaluate, predict, report, batch scoring) never write these
RUN_OWN_FILES = ("results.json", "metrics.csv", "train.log", ".lock")
RUN_OWN_FOLDERS = ("checkpoints", "tensorboard", "evaluations", "plots")


def check_not_run_file(path: Path, key: str) -> None:
    """StorageError (one line) when ``path`` (given as ``key=``) is a file a run folder writes
    itself or lies in one of its own folders (:data:`RUN_OWN_FILES`, ``ranks_*.parquet``,
    :data:`RUN_OWN_FOLDERS`): a reader's output goes beside a run's files, never over them.
    A run folder is one holding ``checkpoints/``."""
    path = Path(path).expanduser().absolute()
    for depth, folder in enumerate(path.parents):
        if depth > 3:
            return
        if (folder / "checkpoints").is_dir():
            first, *rest = path.relative_to(folder).parts
            ranks = first.startswith("ranks_") and first.endswith(".parquet")
            own = first in RUN_OWN_FOLDERS if rest else (first in RUN_OWN_FILES or ranks)
            if own:
                raise StorageError(
                    f"{key}={path} would overwrite a file of run folder {folder} (written by "
                    "its run, read by the other tools); write elsewhere, e.g. beside the run"
                )
            return


def override_value(value: str) -> str:
    """``value`` as Hydra's override grammar reads it back: as is when plain, else quoted (a
    sweep cell's name, ``readout_v1/train.seed=0,data=...``, holds ``=`` and ``,``)."""
    if re.fullmatch(r"[\w./:@%+-]+", value):
        return value
    # in quotes, Hydra reads a backslash as an escape only before a quote or the closing one
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value).replace("'", "\\'")
    return f"'{escaped}'"


def banner(run: str, storage_root: str, argv: Sequence[str], run_name: str) -> list[str]:
    """The first lines of a run: where it lives and the command that resumes it."""
    source = (
        "from storage_root="
        if any(a.split("=", 1)[0].lstrip("+") == "storage_root" for a in argv)
        else f"from ${ENV_STORAGE_ROOT}"
        if os.environ.get(ENV_STORAGE_ROOT)
        else "default"
    )
    args = [a for a in argv if a.split("=", 1)[0].lstrip("+") not in ("run_name", "resume")]
    name = override_value(run_name)
    resume = shlex.join(["python", "-m", "cmpnn_dist.train", *args, f"run_name={name}"])
    return [
        f"run folder: {run}  (storage_root {storage_root}, {source})",
        f"resume with: {resume}",
    ]


# ---------------------------------------------------------------------- one run per folder


class RunLock:
    """``<run>/.lock`` while a run owns its folder: ``{"host", "pid", "process", "started"}``
    (``process``: the owner's boot and start time, so a later process that reuses the pid is
    not mistaken for it, :mod:`~cmpnn_dist.runs.processes`).

    :meth:`acquire` creates it exclusively (``O_EXCL`` locally; on an object store a check,
    then a write: best effort).  A lock held by a live process -- or by any process of
    another host, whose liveness cannot be checked from here -- is one
    :class:`~cmpnn_dist.storage.errors.StorageError` naming its host and pid; the lock of a
    process of this host that is gone (its pid free, or given to another process since) is
    taken over with one line, once the writer it recorded has ended
    (:func:`~cmpnn_dist.runs.writer_lock.wait_for_writer`).  :meth:`release` deletes it.
    ``owner``: the record this process wrote (what its workers check before they publish).
    """

    def __init__(self, run: str) -> None:
        self.run = fs.normalize(run)
        self.path = fs.join(self.run, LOCK_FILE)
        self.held = False
        self.owner: dict[str, Any] = {}

    def _mine(self) -> str:
        import json
        import socket

        pid = os.getpid()
        self.owner = {
            "host": socket.gethostname(),
            "pid": pid,
            "process": identity(pid),
            "started": time.time(),
        }
        return json.dumps(self.owner)

    def _create(self) -> bool:
        local = fs.local_path(self.path)
        if local is None:
            if fs.exists(self.path):
                return False
            fs.write_text(self.path, self._mine())
            return True
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        text = self._mine().encode()
        with failing_writes(local, len(text)):
            try:
                write_all(fd, text)
            except BaseException:
                local.unlink(missing_ok=True)
                raise
            finally:
                os.close(fd)
        return True

    def acquire(self, say: Any = print) -> None:
        import json
        import socket

        for _ in range(3):
            if self._create():
                self.held = True
                return
            try:
                owner = json.loads(fs.read_text(self.path))
            except (OSError, ValueError):
                owner = {}
            host, pid = owner.get("host"), owner.get("pid")
            here = host == socket.gethostname()
            checkable = here and isinstance(pid, int)
            if checkable and not still_running(pid, owner.get("process"), owner.get("started")):
                wait_for_writer(self.run, say)
                say(f"taking over the lock of run folder {self.run} (pid {pid} on {host} is gone)")
                self._remove()
                continue
            raise StorageError(
                f"run folder {self.run} is in use by pid {pid} on host {host} "
                f"({self.path}); wait for it, use another run_name, or delete the lock file "
                "if that process is gone"
            )
        raise StorageError(f"could not lock run folder {self.run} ({self.path})")

    def _remove(self) -> None:
        for name in (WRITER_FILE, LOCK_FILE):  # the writer record first: it names this lock
            target = fs.join(self.run, name)
            local = fs.local_path(target)
            if local is not None:
                local.unlink(missing_ok=True)
            elif fs.exists(target):
                fsys, path = fs.filesystem(target)
                fsys.delete_file(path)

    def release(self) -> None:
        if self.held:
            self._remove()
            self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run(run: str, resume: bool, say: Any = None) -> RunLock:
    """Lock run folder ``run`` for this process (see :class:`RunLock`).  With ``resume``
    False an existing folder is checked for a live owner first, then moved aside
    (``<run>.replaced-<time>``), and the fresh folder is locked."""
    import sys

    def _say(msg: str) -> None:
        print(f"[cmpnn_dist] {msg}", file=sys.stderr, flush=True)

    lock = RunLock(run)
    lock.acquire(say or _say)
    if not resume and is_nonempty_dir(run):
        lock.release()
        moved = move_aside(run)
        (say or _say)(f"resume=false: moved the existing run folder to {moved}")
        lock.acquire(say or _say)
    return lock


class Claim:
    """A run folder this process has locked for one run (:func:`claim_run`).

    ``existed``: the folder held something of an earlier attempt before this start (a
    failed start then leaves it as it was; otherwise it is removed unless it holds a
    checkpoint, see :func:`remove_failed_start`)."""

    def __init__(self, run: str, lock: RunLock, existed: bool) -> None:
        self.run, self.lock, self.existed = run, lock, existed

    def release(self) -> None:
        self.lock.release()

    def abandon(self) -> bool:
        """A start that failed: release the lock and remove the folder if this start made it
        and it holds no checkpoint.  Returns True when the folder was removed."""
        self.release()
        return remove_failed_start(self.run, self.existed)


def claim_run(run: str, resume: bool, say: Any = None) -> Claim:
    """Lock run folder ``run`` for this process (:func:`lock_run`: a folder in use is one
    StorageError; ``resume`` False moves an existing folder aside) and remember whether this
    start made the folder."""
    existed = exists(run) and is_nonempty_dir(run)
    lock = lock_run(run, resume, say)
    return Claim(run, lock, existed and resume)
