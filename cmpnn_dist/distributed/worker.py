"""The function every Ray Train worker runs: open the data, build the context, call ``fit``.

Errors that cannot succeed on a retry (:func:`is_fatal`: a checkpoint that does not fit the
model or the data, a missing or bad dataset, a full disk, a read-only or non-directory
storage root) do not go back to Ray, which would restart the worker group up to
``cluster.max_failures`` times: the worker puts the message in the driver's
:class:`Outcome` actor and returns normally, and the driver raises it as one error line
(exit status 2).  Every rank must stop: errors at start (dataset, checkpoint restore) hit
every rank alike; an error on rank 0 inside the training loop (writing a checkpoint, the
metrics) releases the other ranks through the status broadcast of ``RayTrainContext.report``.

Ctrl-C / SIGTERM: the driver records the signal in the same :class:`Outcome` actor
(:meth:`Outcome.request_stop`); the ranks see it through ``RayTrainContext.stop_signal``,
checkpoint the current step and raise
:class:`~cmpnn_dist.training.interrupt.TrainingInterrupted`, which the worker turns into a
normal return (Ray would otherwise retry it) after rank 0 has recorded the step and the
checkpoint in the actor (:meth:`Outcome.interrupted`) for the driver's one line.

Any other error goes back to Ray (retried up to ``cluster.max_failures`` times) after the
worker has put its rank, step, cause and traceback in the same actor
(:meth:`Outcome.crashed`): the driver writes the tracebacks to the run's log and names the
rank, the step and the cause in one line (:mod:`cmpnn_dist.distributed.crash_report`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import ray
import torch

from cmpnn_dist.runs.checkpoint import CheckpointError, is_fatal_os_error
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.training.interrupt import TrainingInterrupted

from . import faults, remote
from .context import PeerStoppedError, RayTrainContext
from .crash_report import crash_record, quiet_ray_train_errors
from .stop import StopFlag

logger = logging.getLogger(__name__)

RESULT_FILE = "results.json"


@ray.remote(num_cpus=0)
class Outcome(StopFlag):
    """Driver-side mailbox: the first error a worker found not worth retrying, the driver's
    stop request (a signal number: :class:`~.stop.StopFlag`) and where rank 0 stopped on it."""

    def __init__(self) -> None:
        super().__init__()
        self.error: str | None = None
        self.stopped: tuple[int, int, str | None] | None = None  # (signal, step, checkpoint)
        self.attempt = 0  # counted by rank 0's starts: Ray restarts the whole group
        self.records: list[dict[str, Any]] = []

    def started(self, rank: int) -> None:
        if rank == 0:
            self.attempt += 1

    def crashed(self, record: dict[str, Any]) -> None:
        """A rank's error that goes back to Ray (retried while the budget lasts):
        :func:`~cmpnn_dist.distributed.crash_report.crash_record`, stamped with the attempt."""
        self.records.append({**record, "attempt": max(self.attempt, 1)})

    def crashes(self) -> list[dict[str, Any]]:
        return list(self.records)

    def fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    def get(self) -> str | None:
        return self.error

    def interrupted(self, signum: int, step: int, checkpoint: str | None) -> None:
        """Rank 0 checkpointed step ``step`` at ``checkpoint`` and stopped on ``signum``."""
        self.stopped = (signum, step, checkpoint)

    def interruption(self) -> tuple[int, int, str | None] | None:
        return self.stopped


def is_fatal(exc: BaseException) -> bool:
    """Errors that a restarted worker group would hit again."""
    from cmpnn_dist.config import ConfigError

    fatal = (CheckpointError, StorageError, PeerStoppedError, ConfigError)
    return isinstance(exc, fatal) or is_fatal_os_error(exc)


def result_summary(result: Any, ctx: RayTrainContext, run_uri: str) -> dict[str, Any]:
    """The JSON summary rank 0 leaves in the run folder (read back by the driver)."""
    return {
        "run_dir": run_uri,
        "step": result.step,
        "best_step": result.best_step,
        "resumed_from_step": result.resumed_from_step,
        "resumed_from": ctx.resumed_from,
        "valid": result.best_valid,
        "test": result.test,
        "world_size": ctx.world_size,
        "timing": ctx.timer.summary() if ctx.timer.enabled else None,
        "context_timing_s": dict(ctx.timings),
    }


def train_worker(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``.

    ``config``: ``cfg`` (the resolved :class:`~cmpnn_dist.config.Config`), ``run_uri`` (the
    run folder, absolute path or URI), ``dataset`` (the dataset folder, absolute path or URI)
    ``outcome`` (an :class:`Outcome` handle, optional) and ``owner`` (the driver's run lock
    record, optional: rank 0 publishes only while the lock is still that driver's, see
    :mod:`cmpnn_dist.runs.writer_lock`).
    """
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.loop import fit

    cfg = config["cfg"]
    run_uri = config["run_uri"]
    if not cfg.cluster.use_gpu:
        # a fixed intra-op thread count keeps CPU reductions reproducible across restarts
        torch.set_num_threads(max(1, int(cfg.cluster.cpus_per_worker)))
    ctx: RayTrainContext | None = None
    rank = ray.train.get_context().get_world_rank()
    node = ray.get_runtime_context().get_node_id()
    faults.log_attempt(rank, node)
    outcome = config.get("outcome")
    if outcome is not None:
        ray.get(outcome.started.remote(rank))
        quiet_ray_train_errors()  # every error is reported below, its traceback in the run log
    try:
        ctx = RayTrainContext(
            run_uri,
            resume=cfg.resume,
            use_gpu=cfg.cluster.use_gpu,
            keep_last=cfg.checkpoint.keep_last,
            stops=config.get("outcome"),
            owner=config.get("owner"),
        )
        data = load_train_data(
            open_dataset(remote.localize_dataset(config["dataset"])), cfg.eval.filter
        )
        result = fit(cfg, data, ctx, run_dir=ctx.run_dir)
        ctx.in_loop = False
        if ctx.is_main:
            summary = result_summary(result, ctx, run_uri)
            ctx.check_owner()
            remote.write_text(remote.join(run_uri, RESULT_FILE), json.dumps(summary, indent=1))
    except TrainingInterrupted as stop:  # the driver's Ctrl-C / SIGTERM: checkpointed, stop
        if ctx is not None and ctx.is_main and outcome is not None:
            ray.get(outcome.interrupted.remote(stop.signum, stop.step, stop.checkpoint))
    except Exception as exc:
        if outcome is not None and not is_fatal(exc):
            ray.get(outcome.crashed.remote(crash_record(exc, rank, node)))
        if outcome is None or not is_fatal(exc):
            raise
        if ctx is not None:
            ctx.stop_peers()
        if not isinstance(exc, PeerStoppedError):
            logger.error("rank %d: %s (not retried)", rank, exc)
            ray.get(outcome.fail.remote(str(exc)))
    finally:
        if ctx is not None:
            ctx.close()
