"""Ctrl-C / SIGTERM while the driver waits for Ray Train: the workers checkpoint and stop.

Ray Train's ``TorchTrainer.fit`` installs its own SIGINT handler when it runs in the main
thread (it aborts the run: the workers are torn down and every step since the last
checkpoint is lost).  So the driver runs ``fit`` in a thread (:func:`fit_until_stopped`) and
keeps the main thread for the signals, with the in-process handlers
(:class:`~cmpnn_dist.training.interrupt.StopRequests`):

* the first SIGINT / SIGTERM is passed on to the workers (``request_stop(signum)``: the
  driver's actor, polled by rank 0 between steps; the decision is broadcast to every rank),
  which finish the current step, checkpoint it through the normal publish path and return;
  the driver then raises :class:`~cmpnn_dist.training.interrupt.TrainingInterrupted` (one line,
  exit status 130 / 143, see ``driver.py``);
* a second Ctrl-C raises KeyboardInterrupt at once (the driver stops Ray on its way out);
* workers that have not stopped ``grace_s`` seconds after the signal: :class:`WorkersDidNotStop`
  (one line naming the newest checkpoint), and the driver stops them by leaving (its
  ``ray.shutdown()``, or the end of the driver's job on a cluster it joined).

The stop request reaches the workers through Ray (an actor call), not through files, so it
works across nodes and with any storage root.  A sweep (``distributed/tune_trials.py``) does the
same around Tune's ``fit``: its cells train in Tune trials, which poll a :class:`StopFlag`
actor (:func:`stop_source`) after each step.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from cmpnn_dist.training.interrupt import StopRequests, TrainingInterrupted

JOIN_POLL_S = 0.2  # the main thread wakes this often to pass a signal on
FLAG_POLL_S = 1.0  # a sweep's cell asks the flag at most this often (a step may take ms)


class StopFlag:
    """The first stop request of a driver (a signal number), for its workers or its sweep's
    cells to read.  Created as a Ray actor with ``num_cpus=0`` (:func:`new_stop_flag`; the
    driver's :class:`~cmpnn_dist.distributed.worker.Outcome` is one too): it takes no CPU from
    the trials."""

    def __init__(self) -> None:
        self._signum: int | None = None

    def request_stop(self, signum: int) -> None:
        """The driver got ``signum`` (SIGINT / SIGTERM); the first request wins."""
        if self._signum is None:
            self._signum = signum

    def stop_signal(self) -> int | None:
        return self._signum


def new_stop_flag() -> Any:
    """A :class:`StopFlag` actor on the connected Ray cluster (its handle)."""
    import ray

    return ray.remote(num_cpus=0)(StopFlag).remote()


def stop_source(flag: Any, every_s: float = FLAG_POLL_S) -> Callable[[], int | None]:
    """A poll of the :class:`StopFlag` actor ``flag`` (or of an ``Outcome``) that calls it at
    most every ``every_s`` seconds, the first time at once (the answer in between is the last
    one; a request, once seen, stays): a step may take milliseconds, a call to the actor not."""
    import ray

    seen: dict[str, Any] = {"signum": None, "at": -math.inf}

    def poll() -> int | None:
        now = time.monotonic()
        if seen["signum"] is None and now - seen["at"] >= every_s:
            seen["signum"], seen["at"] = ray.get(flag.stop_signal.remote()), now
        return seen["signum"]

    return poll


class WorkersDidNotStop(TrainingInterrupted):
    """The workers did not stop within ``grace_s`` after the signal: the driver stopped them.
    ``step`` / ``checkpoint`` name the newest checkpoint in the run folder (None: none)."""

    def __init__(self, signum: int, grace_s: float, step: int, checkpoint: str | None) -> None:
        super().__init__(signum, step, checkpoint)
        self.grace_s = grace_s

    def detail(self) -> str:
        newest = (
            f"newest checkpoint {self.checkpoint} (step {self.step})"
            if self.checkpoint
            else "no checkpoint written yet"
        )
        return f": the workers did not stop within {self.grace_s:g} s and were stopped; {newest}"


def fit_until_stopped(
    fit: Callable[[], Any], request_stop: Callable[[int], None], grace_s: float
) -> tuple[Any, int | None]:
    """Run ``fit()`` in a thread while this (main) thread turns SIGINT / SIGTERM into a stop
    request for the workers.

    Args:
        fit: the blocking call (``trainer.fit``); its exception is raised here.
        request_stop: called once, with the signal number, at the first signal.
        grace_s: how long the workers get to stop after the signal.

    Returns:
        ``(fit's result, the signal received or None)``.

    Raises:
        WorkersDidNotStop: ``fit`` still runs ``grace_s`` after the signal (``step`` and
            ``checkpoint`` are filled in by the caller, who knows the run folder).
        KeyboardInterrupt: a second Ctrl-C.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fit()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    # a daemon: a driver that gives up on its workers can still exit
    worker = threading.Thread(target=target, name="ray-train-fit", daemon=True)
    deadline: float | None = None
    with StopRequests() as stops:
        worker.start()
        while worker.is_alive():
            worker.join(JOIN_POLL_S)
            if stops.signum is not None and deadline is None:
                request_stop(stops.signum)
                deadline = time.monotonic() + grace_s
            if deadline is not None and worker.is_alive() and time.monotonic() > deadline:
                raise WorkersDidNotStop(stops.signum or signal.SIGTERM, grace_s, 0, None)
    if "error" in box:
        raise box["error"]
    return box.get("result"), stops.signum
