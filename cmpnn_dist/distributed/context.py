"""``RayTrainContext``: the :class:`~cmpnn_dist.training.context.TrainContext` of a Ray worker.

Checkpoints go through :class:`~cmpnn_dist.runs.checkpoint_store.CheckpointStore`, the same
code as the in-process path, so a Ray run folder and an in-process one look alike
(``<run>/checkpoints/step_XXXXXXXX``, ``<run>/checkpoints/best``) and ``evaluate`` reads both:

* rank 0 writes the checkpoint of step ``s`` at ``checkpoint_path(s)`` (the run folder itself on
  a local or shared filesystem, a scratch folder for a URI) and passes it to ``report``, which
  re-verifies its manifest (a checkpoint that failed to write is never published), commits it
  (uploads it, manifest last, for a URI), updates ``best`` and prunes to ``checkpoint.keep_last``
  from the folder listing -- so folders left by a killed attempt are pruned too.  Ray's own
  checkpoint bookkeeping is not used (``ray.train.report`` is never given a checkpoint);
* ``latest_checkpoint``: rank 0 picks the newest valid checkpoint (torn ones skipped with a
  warning naming them), announces it once ("resuming from step N: ..." or "starting from step
  0" when every checkpoint was invalid) and broadcasts the choice, so every rank resumes from
  the same checkpoint.

Metrics: the loop reports one row per step on every rank.  Rows go to ``metrics.csv`` and
TensorBoard in the run folder (rank 0, through a ``LocalContext``, which rewrites both from
the checkpoint's history on resume).  After each row rank 0 broadcasts one status integer:
``0`` go on, ``2`` rank 0 hit an error that cannot succeed on retry (disk full...), so the
other ranks stop too instead of waiting for a collective timeout (see ``worker.py``).

Ctrl-C / SIGTERM: the driver catches the signal and records it in a small actor (``stops``,
the driver's :class:`~cmpnn_dist.distributed.worker.Outcome`).  ``stop_signal()``, called by
the loop after every step on every rank, has rank 0 ask that actor (at most every
``STOP_POLL_S`` of wall time, so a step costs no round trip) and broadcasts the answer as the
same status integer (``128 + signal``), so every rank checkpoints and stops at the same step.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import ray.train
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from cmpnn_dist.runs.writer_lock import check_owner, register_writer
from cmpnn_dist.storage import fs
from cmpnn_dist.training.context import LocalContext

from . import faults
from .stop import stop_source
from .timing import StepTimer

logger = logging.getLogger(__name__)
RESULTS = "results.json"
STOP_POLL_S = 0.5  # rank 0 asks the driver's actor for a stop request at most this often
STATUS_FATAL = 2  # rank 0 stopped on an error that cannot succeed on retry
STATUS_STOP = 128  # 128 + signal: the driver got SIGINT / SIGTERM, every rank stops


def _plain(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class PeerStoppedError(RuntimeError):
    """Rank 0 stopped on an error that cannot succeed on retry; this rank stops with it."""


def all_gather_rows(t: Tensor, device: torch.device) -> Tensor:
    """All-gather of tensors whose first dimension differs between ranks (pad to the largest,
    gather on ``device``, cut each back); returns the concatenation on ``t``'s device."""
    world = dist.get_world_size()
    n = torch.tensor([t.shape[0]], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n)
    counts = [int(s.item()) for s in sizes]
    padded = torch.zeros((max(counts), *t.shape[1:]), dtype=t.dtype, device=device)
    padded[: t.shape[0]] = t.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(t.device)


class RayTrainContext:
    """TrainContext of one Ray Train worker (DDP over the process group Ray set up).

    Args:
        run_uri: the run folder ``<storage_root>/runs/<run_name>`` (absolute path or URI).
        resume: False ignores existing checkpoints (the driver moved them aside already).
        keep_last: checkpoints kept besides ``best``.
        use_gpu: train on this worker's GPU (``ray.train.torch.get_device()``).
        find_unused_parameters: passed to DDP.  False: every model the config can build uses
            every parameter in each step (``tests/unit/model/test_ddp_parameters.py`` checks the
            whole design space), so DDP's per-step graph traversal for unused ones is not paid.
    """

    def __init__(
        self,
        run_uri: str,
        resume: bool = True,
        use_gpu: bool = False,
        find_unused_parameters: bool = False,
        tensorboard: bool = True,
        keep_last: int = 2,
        stops: Any = None,
        owner: dict[str, Any] | None = None,
    ) -> None:
        tc = ray.train.get_context()
        self.rank = tc.get_world_rank()
        self.world_size = tc.get_world_size()
        if use_gpu:
            from ray.train.torch import get_device

            self.device = get_device()
        else:
            self.device = torch.device("cpu")
        self.run_uri = run_uri
        self.resume = resume
        self.keep_last = keep_last
        self.find_unused_parameters = find_unused_parameters
        self.store = CheckpointStore(run_uri, scratch_tag=f"rank{self.rank}")
        self.resumed_from_step: int | None = None
        self.resumed_from: str | None = None
        self.in_loop = False  # set by wrap_model: the other ranks now meet rank 0 in report
        self.timer = StepTimer()
        self.timings: dict[str, float] = defaultdict(float)
        self._save_started: float | None = None
        self._restore_started: float | None = None
        self._metrics: LocalContext | None = None
        # rank 0 asks the driver's actor; the other ranks hear its answer in the broadcast
        self._poll_stops = stop_source(stops, STOP_POLL_S) if stops is not None else None
        self._stop_signal: int | None = None
        # where rank 0 writes metrics.csv, TensorBoard and fit's results.json: the run folder
        # itself on a local / shared filesystem, else scratch (copied up at checkpoints)
        self.run_dir: Path | None = None
        self.owner = owner  # the driver's lock record: rank 0 writes only while it holds
        if self.is_main:
            if owner is not None:
                register_writer(run_uri, owner)
            local = fs.local_path(run_uri) if not self.store.remote else None
            self.run_dir = local if local is not None else self.store.scratch / "run"
            self._metrics = LocalContext(
                self.run_dir, self.device, resume=True, tensorboard=tensorboard, announce=False
            )

    # ------------------------------------------------------------------ topology
    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _distributed(self) -> bool:
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """DDP(model): broadcasts rank 0's parameters, averages gradients in backward."""
        model = model.to(self.device)
        faults.install(model, self.rank)
        if self._distributed():
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(
                model, device_ids=ids, find_unused_parameters=self.find_unused_parameters
            )
        self.timer.attach(model)
        self.in_loop = True
        return model

    def all_reduce_mean(self, t: Tensor) -> Tensor:
        """Mean of ``t`` over ranks (a new tensor; identity copy on one worker)."""
        out = t.detach().clone()
        if not self._distributed():
            return out
        start = time.perf_counter()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        self.timings["all_reduce_metrics"] += time.perf_counter() - start
        return out / self.world_size

    def all_gather_rows(self, t: Tensor) -> Tensor:
        """Every rank's rows ``t`` [n_k, ...] concatenated in rank order (sharded evaluation)."""
        if not self._distributed():
            return t
        start = time.perf_counter()
        out = all_gather_rows(t, self.device)
        self.timings["all_gather_eval"] += time.perf_counter() - start
        return out

    def _broadcast_object(self, obj: Any) -> Any:
        if not self._distributed():
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _broadcast_status(self, status: int) -> int:
        if not self._distributed():
            return status
        t = torch.tensor([status], device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def stop_peers(self) -> None:
        """Rank 0, after an error that cannot succeed: release the ranks waiting in report."""
        if self.is_main and self.in_loop:
            self.in_loop = False
            self._broadcast_status(STATUS_FATAL)

    # ------------------------------------------------------------------ stop requests
    def stop_requests(self) -> contextlib.nullcontext[None]:
        """Nothing to install: the driver catches SIGINT / SIGTERM (see :meth:`stop_signal`)."""
        return contextlib.nullcontext()

    def stop_signal(self) -> int | None:
        """The signal the driver received (every rank: the same answer, at the same step).

        Rank 0 asks the driver's actor at most every ``STOP_POLL_S`` seconds; its answer goes to
        the other ranks with one broadcast, which also carries a fatal stop of rank 0."""
        if self._stop_signal is not None:
            return self._stop_signal
        status = 0
        if self.is_main and self._poll_stops is not None:
            signum = self._poll_stops()
            status = STATUS_STOP + signum if signum else 0
        status = self._broadcast_status(status)
        if status == STATUS_FATAL:
            self.in_loop = False
            raise PeerStoppedError("rank 0 stopped on an error that cannot succeed on retry")
        if status > STATUS_STOP:
            self._stop_signal = status - STATUS_STOP
        return self._stop_signal

    def say(self, msg: str) -> None:
        # one channel only: Ray Train's workers already echo both logging and stdout, and a
        # print came out twice besides the log record
        logger.warning(msg)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_path(self, step: int) -> Path:
        # the loop writes the checkpoint right after asking for its path and reports it right
        # after writing: the time in between is the checkpoint save (state_dicts + torch.save)
        self._save_started = time.perf_counter()
        return self.store.write_path(step)

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint every rank resumes from (rank 0 chooses, the others follow)."""
        choice = None
        if self.is_main:
            found = self.store.resume_point(self.resume)  # the same sequence as in-process
            line = self.store.resume_line(found)  # which checkpoint, what was skipped, why
            if line is not None:
                self.say(line)
            if found is not None:
                choice = (found.uri, found.step)
                local = found.path
            else:
                if self._metrics is not None:
                    self._metrics.start_fresh()
        choice = self._broadcast_object(choice)
        self._restore_started = time.perf_counter()
        if choice is None:
            return None
        uri, step = choice
        self.resumed_from, self.resumed_from_step = uri, step
        return local if self.is_main else self.store.local(uri)

    def on_resume(self, history: list[dict[str, Any]], step: int) -> None:
        if self._restore_started is not None:  # load_checkpoint + load_state_dicts
            self.timings["checkpoint_restore"] += time.perf_counter() - self._restore_started
        self.resumed_from_step = step
        if self._metrics is not None:
            self._metrics.on_resume(history, step)

    def report(self, metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        """Log a history row; publish the checkpoint of this row (rank 0); then the status."""
        row = _plain(dict(metrics))
        if self._metrics is not None:
            self._metrics.report(row, None)
        if checkpoint_dir is not None and self.is_main:
            self._publish(Path(checkpoint_dir))
        if self._broadcast_status(0) == STATUS_FATAL:
            self.in_loop = False
            raise PeerStoppedError("rank 0 stopped on an error that cannot succeed on retry")

    def check_owner(self) -> None:
        """Rank 0, before it publishes: the driver still holds the run (else OwnerGone)."""
        if self.owner is not None:
            check_owner(self.run_uri, self.owner)

    def _publish(self, local: Path) -> None:
        self.check_owner()
        if self._save_started is not None:
            self.timings["checkpoint_save"] += time.perf_counter() - self._save_started
            self.timings["checkpoint_saves"] += 1
            self._save_started = None
        start = time.perf_counter()
        if self._metrics is not None:  # its events on disk before the checkpoint holding them
            self._metrics.flush_tensorboard()
        manifest = self.store.publish(local, self.keep_last)  # the same sequence as in-process
        self._sync_metrics_file()
        if self.store.remote:
            shutil.rmtree(local, ignore_errors=True)
        self.timings["checkpoint_report"] += time.perf_counter() - start
        self.timings["checkpoint_bytes"] = float(sum(f["size"] for f in manifest["files"].values()))

    def _sync_metrics_file(self) -> None:
        if self._metrics is None or not self.store.remote:
            return
        if self._metrics.run_dir.is_dir():  # results.json: the worker writes the summary
            fs.upload_tree(self._metrics.run_dir, self.run_uri, skip=("checkpoints", RESULTS))

    def close(self) -> None:
        if self._metrics is not None:
            self._sync_metrics_file()
            self._metrics.close()
        self.store.close()
