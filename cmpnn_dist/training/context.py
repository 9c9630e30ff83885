"""Where the training loop runs: one process (:class:`LocalContext`) or a DDP worker.

:func:`cmpnn_dist.training.loop.fit` talks to its environment only through a
:class:`TrainContext`.  The contract fit relies on:

* ``report(metrics, checkpoint_dir)`` is called on **every rank**, the same number of times,
  once per history row in order (a ``kind="train"`` row per step, a ``kind="valid"`` row per
  validation, a ``kind="test"`` row at the end).  ``checkpoint_dir`` is non-None only on the
  main rank, on the row of the step at which that checkpoint was written (it is complete and
  verified when passed; a checkpoint that failed to write is never reported).
* ``checkpoint_path(step)`` says where the main rank writes the checkpoint of ``step``
  (a Ray context may return a temporary directory and hand it to ``ray.train.report``).
* ``latest_checkpoint()`` is the checkpoint to resume from (None: start fresh); it announces
  the choice once ("resuming from step N: <checkpoint>", or "starting from step 0" when every
  checkpoint was invalid).
* ``on_resume(history, step)`` is called after a checkpoint was loaded, with the restored
  history, so persisted logs can drop rows newer than ``step`` (work lost by the failure).
* ``all_reduce_mean`` averages a tensor over ranks (identity on one process); gradients are
  averaged by the wrapper that ``wrap_model`` returns (DDP), not by fit.
* ``all_gather_rows(t [n_k, c])`` (optional; evaluation looks it up when ``world_size > 1``)
  concatenates every rank's rows in rank order, ``n_k`` may differ between ranks.
* ``stop_requests()`` is a context manager around the step loop: while it is active a SIGINT /
  SIGTERM becomes a stop request instead of stopping the process (in-process: this process's
  signal handlers; a Ray worker or a sweep's cell: the driver catches the signal and tells
  the workers or cells).
* ``stop_signal()`` is called on **every rank** once per step, after the step: the signal
  number of a pending stop request or None, the **same answer on every rank** (so every rank
  checkpoints and stops at the same step: see :mod:`~cmpnn_dist.training.interrupt`).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import shutil
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from cmpnn_dist.runs.folder import is_nonempty_dir, move_aside
from cmpnn_dist.storage import fs
from cmpnn_dist.storage.atomic import append_text, failing_writes, write_atomic

from .interrupt import StopRequests

logger = logging.getLogger(__name__)

BASE_COLUMNS = ["kind", "step", "epoch", "loss", "lr", "time_s"]
_EVENT_WRITER_THREAD = "_AsyncWriterThread"  # tensorboard's background event file writer


def _quiet_event_writer_thread() -> None:
    """Keep the traceback of TensorBoard's event-writer thread off the console.

    That thread stores a failed write (a full disk...) and re-raises it, which Python prints
    as an ``Exception in thread`` traceback; the writer raises the same exception again in
    the thread that calls ``add_scalar`` / ``flush`` / ``close`` next, where
    :func:`~cmpnn_dist.storage.atomic.failing_writes` makes it the run's one ``error:``
    line.  Installed once; other threads' exceptions go to the previous hook."""
    previous = threading.excepthook
    if getattr(previous, "_cmpnn_quiet_event_writer", False):
        return

    def hook(args: Any) -> None:
        if type(args.thread).__name__ != _EVENT_WRITER_THREAD:
            previous(args)

    hook._cmpnn_quiet_event_writer = True  # type: ignore[attr-defined]
    threading.excepthook = hook


@runtime_checkable
class TrainContext(Protocol):
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool: ...

    def wrap_model(self, model: nn.Module) -> nn.Module: ...

    def all_reduce_mean(self, t: Tensor) -> Tensor: ...

    def report(self, metrics: dict[str, Any], checkpoint_dir: Path | None) -> None: ...

    def latest_checkpoint(self) -> Path | None: ...

    def checkpoint_path(self, step: int) -> Path: ...

    def on_resume(self, history: list[dict[str, Any]], step: int) -> None: ...

    def stop_requests(self) -> AbstractContextManager[Any]: ...

    def stop_signal(self) -> int | None: ...

    def close(self) -> None: ...


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("train.device=cuda but torch.cuda.is_available() is False")
    if name != "cpu" and not name.startswith("cuda"):
        raise ValueError(f"unknown train.device {name!r} (auto | cpu | cuda)")
    return torch.device(name)


class LocalContext:
    """One process: checkpoints under ``<run_dir>/checkpoints/step_XXXXXXXX`` (and ``best``, see
    :mod:`~cmpnn_dist.runs.checkpoint_store`), metrics in ``<run_dir>/metrics.csv`` and
    TensorBoard event files under ``<run_dir>/tensorboard``.

    The run folder is created at the first write, so a start that fails before training
    leaves nothing behind.  On every start the logs are made to match the checkpoint the run
    continues from: resumed at step ``s``, metrics.csv and the TensorBoard events are rewritten
    from the checkpoint's history (rows up to ``s``, each once); started fresh in an existing
    folder (no valid checkpoint), the old logs and ``best`` are removed.  A write that cannot
    succeed (no space left, read-only...) is one error naming the file; metrics.csv never
    keeps a half row (:mod:`cmpnn_dist.storage.atomic`).

    Args:
        run_dir: the run's directory.
        device: torch device for training.
        keep_last: checkpoints kept (``checkpoints/best`` is kept besides them).
        resume: False moves an existing, non-empty ``run_dir`` aside to
            ``<run_dir>.replaced-<time>`` and starts fresh.
        tensorboard: also write TensorBoard scalars.
        announce: print "resuming from step N" / "starting from step 0" lines (main rank).
        stop_source: stop requests made outside this process (a sweep's cell runs in a Ray
            Tune trial, where signals cannot be caught: its driver catches them), polled by
            :meth:`stop_signal` after each step; returns a signal number or None.
    """

    rank = 0
    world_size = 1

    def __init__(
        self,
        run_dir: Path,
        device: torch.device | str = "cpu",
        keep_last: int = 2,
        resume: bool = True,
        tensorboard: bool = True,
        announce: bool = True,
        stop_source: Callable[[], int | None] | None = None,
    ) -> None:
        self.run_uri = fs.normalize(run_dir)
        self.device = torch.device(device)
        self.keep_last = keep_last
        self.resume = resume
        self.store = CheckpointStore(self.run_uri)
        # logs are written to a local folder: the run folder itself, or for a URI a scratch
        # mirror whose files (all but checkpoints/) are uploaded at each checkpoint and at close
        local = fs.local_path(self.run_uri) if not self.store.remote else None
        self.run_dir = local if local is not None else self.store.scratch / "run"
        self.checkpoint_root = self.store.root
        self.csv_path = self.run_dir / "metrics.csv"
        self.tb_dir = self.run_dir / "tensorboard"
        self._tensorboard = tensorboard
        self._announce = announce
        self._writer = None
        self._columns: list[str] = list(BASE_COLUMNS)
        self._rows: list[dict[str, Any]] = []
        self.moved_aside: str | None = None
        self._stops: StopRequests | None = None
        self._stop_source = stop_source
        if not resume and is_nonempty_dir(self.run_uri):
            self.moved_aside = move_aside(self.run_uri)
            self.say(f"resume=false: moved the existing run folder to {self.moved_aside}")

    @property
    def is_main(self) -> bool:
        return True

    def say(self, msg: str) -> None:
        logger.info(msg)
        if self._announce:
            print(f"[cmpnn_dist] {msg}", file=sys.stderr, flush=True)

    def wrap_model(self, model: nn.Module) -> nn.Module:
        return model

    def all_reduce_mean(self, t: Tensor) -> Tensor:
        return t

    def all_gather_rows(self, t: Tensor) -> Tensor:
        """Rows of every rank concatenated in rank order (one process: ``t`` itself)."""
        return t

    def checkpoint_path(self, step: int) -> Path:
        return self.store.write_path(step)

    def stop_requests(self) -> StopRequests:
        """This process's SIGINT / SIGTERM handlers for the step loop (main thread only; a
        second Ctrl-C raises KeyboardInterrupt): the signal is recorded for
        :meth:`stop_signal`."""
        self._stops = StopRequests()
        return self._stops

    def stop_signal(self) -> int | None:
        """The signal received since :meth:`stop_requests` was entered, or else the one
        ``stop_source`` reports; None when neither asks to stop."""
        own = None if self._stops is None else self._stops.signum
        if own is None and self._stop_source is not None:
            return self._stop_source()
        return own

    def latest_checkpoint(self) -> Path | None:
        """The newest valid checkpoint (announced); None starts fresh and clears old logs."""
        found = self.store.resume_point(self.resume)
        line = self.store.resume_line(found)  # which checkpoint, what was skipped and why
        if line is not None:
            self.say(line)
        if found is not None:
            return found.path
        self.start_fresh()
        return None

    def start_fresh(self) -> None:
        """Drop logs and ``best`` left in the run folder by attempts that cannot be resumed."""
        self.store.reset()
        if self.store.remote:
            for name in ("metrics.csv", "results.json"):
                fs_file = fs.join(self.run_uri, name)
                if fs.is_file(fs_file):
                    fsys, path = fs.filesystem(fs_file)
                    fsys.delete_file(path)
            fs.delete_dir(fs.join(self.run_uri, "tensorboard"))
        self._rows = []
        self._columns = list(BASE_COLUMNS)
        self.csv_path.unlink(missing_ok=True)
        self._reset_tensorboard()

    def commit_checkpoint(self, path: Path) -> dict[str, Any]:
        """Publish the checkpoint just written at ``path``: verify it, update ``best``, prune."""
        manifest = self.store.publish(path, self.keep_last)
        if self.store.remote:
            shutil.rmtree(path, ignore_errors=True)
        self.sync()
        return manifest

    def sync(self) -> None:
        """For a URI run folder: upload the local mirror's files (metrics.csv, TensorBoard
        events, results.json, ranks_*.parquet), so the run folder holds the same files as a
        local one.  Nothing to do for a local run folder."""
        if self.store.remote and self.run_dir.is_dir():
            if self._writer is not None:
                self._writer.flush()
            fs.upload_tree(self.run_dir, self.run_uri, skip=("checkpoints",))
            self._drop_stale_events()

    def _drop_stale_events(self) -> None:
        """Delete the URI run folder's TensorBoard files that the local mirror does not hold:
        the event files of earlier attempts.  The mirror is the whole truth -- on resume it
        rewrote every row up to the checkpoint (:meth:`on_resume`) -- so after the upload each
        (tag, step) is in one file, as in a local run folder, whose old files
        :meth:`_reset_tensorboard` deletes directly."""
        import pyarrow.fs as pafs

        if not self._tensorboard:
            return
        fsys, base = fs.filesystem(fs.join(self.run_uri, "tensorboard"))
        if fsys.get_file_info(base).type != pafs.FileType.Directory:
            return
        mine = self.tb_dir.rglob("*") if self.tb_dir.is_dir() else ()
        keep = {p.relative_to(self.tb_dir).as_posix() for p in mine if p.is_file()}
        for info in fsys.get_file_info(pafs.FileSelector(base, recursive=True)):
            if info.type == pafs.FileType.File and info.path[len(base) + 1 :] not in keep:
                fsys.delete_file(info.path)

    # ------------------------------------------------------------------ metrics
    def on_resume(self, history: list[dict[str, Any]], step: int) -> None:
        """Rewrite metrics.csv and the TensorBoard events from the restored history (rows up
        to ``step``), so the work lost by the failure is logged once, when it is redone."""
        self._rows = [dict(r) for r in history]
        self._columns = list(BASE_COLUMNS)
        for row in self._rows:
            self._add_columns(row)
        self._rewrite_csv()
        self._reset_tensorboard()
        with failing_writes(self.tb_dir):
            for row in self._rows:
                self._log_tensorboard(row)
        self.sync()  # a URI run folder: the rewritten logs replace the earlier attempts' now

    def report(self, metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        row = dict(metrics)
        self._rows.append(row)
        if self._add_columns(row) or not self.csv_path.exists():
            self._rewrite_csv()
        else:
            append_text(self.csv_path, self._csv_text([row], header=False))
        with failing_writes(self.tb_dir):
            self._log_tensorboard(row)
        if checkpoint_dir is not None:
            self.flush_tensorboard()
            self.commit_checkpoint(Path(checkpoint_dir))

    def flush_tensorboard(self) -> None:
        """Write the queued TensorBoard events to disk (before each checkpoint is published,
        so a write that fails there -- a full disk -- stops the run at that checkpoint with
        one error naming the folder, and the run resumes from it)."""
        if self._writer is not None:
            with failing_writes(self.tb_dir):
                self._writer.flush()

    def _add_columns(self, row: dict[str, Any]) -> bool:
        new = [k for k in row if k not in self._columns]
        self._columns.extend(new)
        return bool(new)

    def _csv_text(self, rows: list[dict[str, Any]], header: bool) -> str:
        out = io.StringIO()
        w = csv.DictWriter(out, self._columns, extrasaction="ignore")
        if header:
            w.writeheader()
        w.writerows(rows)
        return out.getvalue()

    def _rewrite_csv(self) -> None:
        write_atomic(self.csv_path, self._csv_text(self._rows, header=True))

    def _reset_tensorboard(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            with failing_writes(self.tb_dir):
                writer.close()
        shutil.rmtree(self.tb_dir, ignore_errors=True)

    def _log_tensorboard(self, row: dict[str, Any]) -> None:
        if not self._tensorboard or "step" not in row:
            return
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            _quiet_event_writer_thread()
            self._writer = SummaryWriter(str(self.tb_dir))
        kind = row.get("kind", "train")
        for key, value in row.items():
            if key in ("kind", "step", "epoch") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                name = key[len(kind) + 1 :] if key.startswith(kind + "_") else key
                tag = f"{kind}/{name}"
                self._writer.add_scalar(tag, value, int(row["step"]))

    def close(self) -> None:
        try:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                with failing_writes(self.tb_dir):
                    writer.close()
            self.sync()
        finally:
            self.store.close()
