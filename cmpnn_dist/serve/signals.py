"""Ctrl-C (SIGINT) and SIGTERM at any moment of the server's life: it stops, nothing left.

:class:`StopSignals` installs its handlers first (whatever the process inherited: a
background job of a non-interactive shell starts with SIGINT ignored) and keeps them while
Ray starts: :func:`cmpnn_dist.serve.launch.start` runs ``ray.init`` in a helper thread, where
Ray's Python code installs no SIGTERM handler (and its C++ one is replaced as soon as it
appears, :meth:`StopSignals.reclaim`).  A signal is always recorded (:attr:`signum`, the
first one, and :attr:`event`); what else it does depends on where the main thread is:

* inside :meth:`interruptible` (loading the checkpoint, starting Serve and the replicas) it
  also raises :class:`Interrupt`, a ``KeyboardInterrupt``: what Ray's own waits (``ray.get``)
  expect from Ctrl-C, so the start unwinds at once;
* inside :meth:`deferred` (waiting for Ray's start, which cannot be abandoned half-way, and
  the shutdown) it is only recorded; leaving the block raises it when an enclosing
  :meth:`interruptible` block is waiting for it;
* while serving it wakes :meth:`wait`.

The command then shuts Ray down and ends with :class:`ServerStopped`, whose exit status is
128 + the signal number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Interrupt(KeyboardInterrupt):
    """Raised in the main thread by a signal inside :meth:`StopSignals.interruptible`."""


class ServerStopped(BaseException):
    """The server stopped on ``signum``; ``result`` is the command's JSON line.

    A BaseException with ``exit_status`` (128 + ``signum``) and ``result``: the CLI
    (:func:`cmpnn_dist.cli.run_cli`) prints this one line, then ``result``, and exits with
    that status."""

    def __init__(self, signum: int, result: dict[str, Any], served: bool) -> None:
        super().__init__()
        self.signum, self.result, self.served = signum, result, served
        self.exit_status = 128 + signum

    def __str__(self) -> str:
        name = signal.Signals(self.signum).name
        when = "" if self.served else " during start-up"
        return f"stopped by {name}{when}: Serve and its Ray are shut down"


class StopSignals:
    """Context manager: SIGINT and SIGTERM handlers for the life of the server (main thread
    only; elsewhere a no-op), the previous handlers restored on exit."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.event = threading.Event()
        self._raising = False
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()
        if self._raising:
            self._raising = False  # once: the unwinding code runs undisturbed
            raise Interrupt

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def reclaim(self) -> None:
        """Install the handlers again: Ray's core worker, created by ``ray.init``, installs a
        SIGTERM handler of its own in C++ (it prints a stack and aborts)."""
        for s in self._old:
            signal.signal(s, self._handle)

    def __exit__(self, *exc: object) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old = {}

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block that a signal interrupts at once (raising :class:`Interrupt` in it); one
        received before it begins is raised on entry."""
        if self.signum is not None:
            raise Interrupt
        outer, self._raising = self._raising, True
        try:
            yield
        finally:
            self._raising = outer

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A block that must run to its end: a signal is only recorded, and raised as
        :class:`Interrupt` when the block ends inside :meth:`interruptible`."""
        outer, self._raising = self._raising, False
        try:
            yield
        finally:
            self._raising = outer
        if outer and self.signum is not None:
            self._raising = False
            raise Interrupt

    def wait(self) -> int:
        """Block until a signal arrives; returns its number."""
        while not self.event.wait(1.0):
            pass
        assert self.signum is not None
        return self.signum
