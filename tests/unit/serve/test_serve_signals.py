"""The server's signal handling (``cmpnn_dist/serve/signals.py``) with real signals sent to
this process: where a signal raises, where it only waits its turn, what the exit says, and
that the handlers before it are back afterwards.  The real server: ``test_serve_faults.py``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from cmpnn_dist.serve.signals import Interrupt, ServerStopped, StopSignals


def _send(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs in this (main) thread at the next bytecode


def test_interruptible_raises_deferred_waits_for_the_end():
    before = {s: signal.getsignal(s) for s in StopSignals.SIGNALS}
    with StopSignals() as signals:
        _send(signal.SIGTERM)  # outside both blocks: recorded only
        assert signals.signum == signal.SIGTERM and signals.event.is_set()
        assert signals.wait() == signal.SIGTERM
        signals.signum = None
        signals.event.clear()

        with pytest.raises(Interrupt):
            with signals.interruptible():
                _send(signal.SIGINT)
                raise AssertionError("not interrupted")
        assert signals.signum == signal.SIGINT

        signals.signum = None
        steps = []
        with pytest.raises(Interrupt):
            with signals.interruptible():
                with signals.deferred():
                    _send(signal.SIGTERM)
                    _send(signal.SIGINT)  # a second signal: the first stays the one named
                    steps.append("deferred block ran to its end")
                steps.append("not reached")
        assert steps == ["deferred block ran to its end"]
        assert signals.signum == signal.SIGTERM

        with pytest.raises(Interrupt):  # a signal received earlier: raised on entry
            with signals.interruptible():
                steps.append("not reached either")
        assert steps == ["deferred block ran to its end"]
    assert {s: signal.getsignal(s) for s in StopSignals.SIGNALS} == before


def test_reclaim_takes_the_handlers_back():
    with StopSignals() as signals:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as another library might
        signals.reclaim()
        _send(signal.SIGTERM)
        assert signals.signum == signal.SIGTERM


def test_the_exit_status_and_line():
    stopped = ServerStopped(signal.SIGINT, {"url": None}, served=False)
    assert stopped.exit_status == 130
    assert str(stopped) == "stopped by SIGINT during start-up: Serve and its Ray are shut down"
    stopped = ServerStopped(signal.SIGTERM, {"url": "http://127.0.0.1:1/"}, served=True)
    assert (stopped.exit_status, str(stopped)) == (
        143,
        "stopped by SIGTERM: Serve and its Ray are shut down",
    )
