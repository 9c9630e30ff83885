"""A crashed distributed run in one line, its tracebacks in the run folder's log.

A worker whose training raises an error that goes back to Ray (a bug, a lost peer, an
injected ``crash`` fault) first hands a :func:`crash_record` (rank, step, cause, full
traceback) to the driver's ``Outcome`` actor.  When the run fails for good, the driver
appends every record, and Ray's own error text, to ``<run>/train.log``
(:func:`write_log`) and raises one line naming the rank, the step and the cause of the last
attempt's first failure and the log's path (:func:`summary`).  A rank that fails only because
another one is gone (gloo's "connection reset by peer") is not that failure: the rank that
died without a word (killed by a signal, lost with its node) is named, at the step its peer
was in.

Ray Train logs the same traceback itself ("Error in training function", from each worker,
and again in its controller's failure-policy line); the worker silences the first
(:func:`quiet_ray_train_errors`) and the driver runs Ray Train's own loggers at WARNING
(``RunConfig(logging_config=...)``, :data:`RAY_TRAIN_LOG_LEVEL`), so the console shows the
driver's one line instead of tracebacks.  Ray Train's system log files keep every level.
"""

from __future__ import annotations

import logging
import os
import re
import time
import traceback
from typing import Any

from cmpnn_dist.storage import fs
from cmpnn_dist.training.failure import step_of

LOG_FILE = "train.log"
RAY_TRAIN_LOG_LEVEL = "WARNING"
# Ray Train's logger of a training function's exception (ray/train/v2/_internal/util.py)
_RAY_TRAIN_ERROR_LOGGER = "ray.train.v2._internal.util"
_RAY_TRAIN_ERROR_PREFIX = "Error in training function"


def cause_of(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (at most ``limit`` characters)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def crash_record(exc: BaseException, rank: int, node: str = "") -> dict[str, Any]:
    """What the driver needs to report a rank's error: rank, step (None: before the first
    step), cause (one line), the full traceback, pid, node and time."""
    return {
        "rank": int(rank),
        "step": step_of(exc),
        "cause": cause_of(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "pid": os.getpid(),
        "node": node,
        "time": time.time(),
    }


class _DropTrainingFunctionErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_RAY_TRAIN_ERROR_PREFIX)


_FILTER = _DropTrainingFunctionErrors()


def quiet_ray_train_errors() -> None:
    """In a worker: drop Ray Train's "Error in training function" traceback (the worker
    reports the error itself, see :func:`crash_record`).  Idempotent."""
    log = logging.getLogger(_RAY_TRAIN_ERROR_LOGGER)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)


def last_attempt(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the last attempt that recorded any, in the order they arrived."""
    if not records:
        return []
    last = max(r.get("attempt", 1) for r in records)
    return [r for r in records if r.get("attempt", 1) == last]


def where(record: dict[str, Any]) -> str:
    step = record.get("step")
    at = f"at step {step}" if step is not None else "before its first step"
    return f"rank {record['rank']} {at}: {record['cause']}"


def ray_failures(error: BaseException) -> list[tuple[int, str]]:
    """``(rank, cause)`` of each worker in Ray's error (a ``WorkerGroupError``), by rank;
    for another error, ``[(-1, cause)]``."""
    failures = getattr(error, "worker_failures", None)
    if isinstance(failures, dict) and failures:
        return [(int(rank), cause_of(exc)) for rank, exc in sorted(failures.items())]
    inner = getattr(error, "controller_failure", None)
    return [(-1, cause_of(inner if isinstance(inner, BaseException) else error))]


# what a rank raises when another rank's process is gone (gloo, NCCL, the TCP store): the
# consequence of a failure elsewhere, never its cause
LOST_PEER = re.compile(
    r"connection (reset|closed) by peer|broken pipe|connection refused|"
    r"NCCL communicator was aborted|socket (closed|timed out)",
    re.IGNORECASE,
)


def summary(records: list[dict[str, Any]], error: BaseException) -> str:
    """One line: the last attempt's first recorded failure that is not a lost peer; else a
    rank that Ray reports failed but that recorded nothing (killed by a signal, lost with its
    node), at the step where the others lost it; else the first recorded failure, else the
    first worker failure in Ray's error."""
    mine = last_attempt(records)
    causes = [r for r in mine if not LOST_PEER.search(r["cause"])]
    if causes:
        return where(causes[0])
    recorded = {r["rank"] for r in mine}
    silent = [(rank, cause) for rank, cause in ray_failures(error) if rank not in recorded]
    if mine and silent and silent[0][0] >= 0:
        rank, cause = silent[0]
        lost = mine[0]
        at = f" at step {lost['step']}" if lost.get("step") is not None else ""
        return (
            f"rank {rank}{at}: its process died without an error ({cause}); rank "
            f"{lost['rank']} then lost its peer ({lost['cause']})"
        )
    if mine:
        return where(mine[0])
    rank, cause = ray_failures(error)[0]
    return f"rank {rank}: {cause}" if rank >= 0 else cause


def write_log(run: str, records: list[dict[str, Any]], error: BaseException | None) -> str:
    """Append the records' tracebacks and Ray's error text to ``<run>/train.log``; returns
    its path (or URI).  The file is rewritten whole, atomically, as the storage layer does."""
    path = fs.join(run, LOG_FILE)
    parts: list[str] = []
    for r in records:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("time", time.time())))
        parts.append(
            f"== {stamp} attempt {r.get('attempt', 1)}: {where(r)} "
            f"(pid {r.get('pid')}, node {r.get('node') or '?'})\n{r['traceback'].rstrip()}\n"
        )
    if error is not None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        parts.append(f"== {stamp} Ray: {type(error).__name__}\n{str(error).rstrip()}\n")
    old = fs.read_text(path) if fs.exists(path) else ""
    fs.write_text(path, old + "".join(parts))
    return path
