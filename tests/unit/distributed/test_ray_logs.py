"""Ray's start-up notices dropped from the console (``cmpnn_dist/distributed/ray_logs.py``).

Ray's own functions log the records (no cluster is started); a handler on each logger shows
what reaches the console: the notices before :func:`quiet_ray_start` (so the test can fail),
none after, and every other record of the same loggers still.  That a real start prints no
notice: ``tests/integration/test_serve.py``, ``tests/integration/test_serve_faults.py`` and the
killed batch job of ``tests/integration/test_predict_batch.py``.
"""

from __future__ import annotations

import logging

import pytest

from cmpnn_dist.distributed.ray_logs import DROPPED, quiet_ray_start

pytest.importorskip("ray")


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def loggers():
    """The loggers of :data:`DROPPED` with a collecting handler, their filters restored."""
    import ray._private.authentication.authentication_token_setup  # noqa: F401
    import ray._private.worker  # noqa: F401

    logs = [logging.getLogger(name) for name in DROPPED]
    saved = [(log, list(log.filters), log.level) for log in logs]
    handler = Collect()
    for log in logs:
        log.filters.clear()
        log.setLevel(logging.INFO)
        log.addHandler(handler)
    yield handler
    for log, filters, level in saved:
        log.removeHandler(handler)
        log.filters[:] = filters
        log.setLevel(level)


def _notices() -> None:
    from ray._private.authentication import authentication_token_setup as auth

    auth._warn_token_auth_enabled()  # what a local ray.init logs at every start
    logging.getLogger("ray._private.worker").warning(
        "SIGTERM handler is not set because current thread is not the main thread."
    )  # the line of ray.init called outside the main thread


def test_the_start_up_notices_are_dropped_and_nothing_else(loggers):
    _notices()
    assert len(loggers.messages) == 2 and "Token authentication is enabled" in loggers.messages[0]
    loggers.messages.clear()
    quiet_ray_start()
    quiet_ray_start()  # idempotent: one filter per logger
    assert all(len(logging.getLogger(name).filters) == 1 for name in DROPPED)
    _notices()
    from ray._private.authentication import authentication_token_setup as auth

    auth._warn_token_auth_disabled()  # another record of the same logger: kept
    logging.getLogger("ray._private.worker").warning("Calling ray.init() again")
    assert [m[:40] for m in loggers.messages] == [
        "Token authentication is disabled for thi",
        "Calling ray.init() again",
    ]
