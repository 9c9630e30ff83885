"""Ctrl-C and SIGTERM during training: finish the step, checkpoint it, stop with one line.

:class:`StopRequests` installs handlers for SIGINT (Ctrl-C) and SIGTERM (``kill``, and the
preemption notice of most clusters) for the duration of a training loop (main thread of the
main process only: ``LocalContext.stop_requests``).  Under Ray the driver installs them around
``TorchTrainer.fit`` and passes the request to the workers, which see it through
``RayTrainContext.stop_signal`` (``cmpnn_dist/distributed/stop.py``): every rank stops at the
same step.  A signal only records the request: the loop finishes the current step, writes a
checkpoint at that step (the same write and publish as a scheduled checkpoint, so ``best``
and pruning follow the usual rules) and raises :class:`TrainingInterrupted`, whose one-line
message names the step and the checkpoint and whose ``exit_status`` is 128 + the signal
number (130 for SIGINT, 143 for SIGTERM).  A second Ctrl-C while that checkpoint is being
written stops at once (Python's KeyboardInterrupt).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class TrainingInterrupted(BaseException):
    """Training stopped on SIGINT / SIGTERM after checkpointing step ``step``.

    A BaseException (like KeyboardInterrupt): ``except Exception`` in library code does not
    swallow it.  ``resume`` (set by the CLI) is the command that continues the run.
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None) -> None:
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        self.exit_status = 128 + signum
        self.resume: str | None = None
        super().__init__()

    def detail(self) -> str:
        """What happened, between the signal's name and the resume command."""
        where = (
            f"checkpoint {self.checkpoint} written"
            if self.checkpoint
            else "no checkpoint written (not the main rank)"
        )
        return f" at step {self.step}: {where}"

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        tail = f"; resume with: {self.resume}" if self.resume else ""
        return f"interrupted by {name}{self.detail()}{tail}"


class StopRequests:
    """Context manager: while active, SIGINT / SIGTERM set :attr:`signum` instead of stopping
    the process (a second SIGINT raises KeyboardInterrupt).  Inactive (a no-op) outside the
    main thread."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}
