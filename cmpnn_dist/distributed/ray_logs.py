"""Ray's start-up notices that tell our users nothing, dropped from the driver's console.

A local ``ray.init`` logs, at every start, that it turned token authentication on (it stays
on: only the notice goes), and, called outside the main thread (the server starts Ray in a
helper thread to keep its own signal handlers, :mod:`cmpnn_dist.serve.launch`), that it set
no SIGTERM handler.  :func:`quiet_ray_start` adds a filter for exactly these records to the
loggers that write them; everything else Ray logs is left as it is.
"""

from __future__ import annotations

import logging

# logger name -> the beginnings of the messages dropped from it
DROPPED: dict[str, tuple[str, ...]] = {
    "ray._private.authentication.authentication_token_setup": (
        "Token authentication is enabled for this Ray cluster",
    ),
    "ray._private.worker": ("SIGTERM handler is not set because current thread",),
}


class _DropNotices(logging.Filter):
    def __init__(self, beginnings: tuple[str, ...]) -> None:
        super().__init__()
        self.beginnings = beginnings

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.beginnings)


def quiet_ray_start() -> None:
    """Drop the notices of :data:`DROPPED` (idempotent; call before ``ray.init``)."""
    for name, beginnings in DROPPED.items():
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropNotices) for f in log.filters):
            log.addFilter(_DropNotices(beginnings))
