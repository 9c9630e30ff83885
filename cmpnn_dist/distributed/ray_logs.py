"""Ray's start-up notices that tell our users nothing, dropped from the driver's console.

A local ``ray.init`` logs, at every start, that it turned token authentication on (it stays
on: only the notice goes) and that it started (or connected to) a Ray, and, called outside
the main thread (the server starts Ray in a helper thread to keep its own signal handlers,
:mod:`cmpnn_dist.serve.launch`), that it set no SIGTERM handler.  :func:`quiet_ray_start`
adds a filter for exactly these records to the loggers that write them; everything else Ray
logs is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

# logger name -> the beginnings of the messages dropped from it
DROPPED: dict[str, tuple[str, ...]] = {
    "ray._private.authentication.authentication_token_setup": (
        "Token authentication is enabled for this Ray cluster",
    ),
    "ray._private.worker": (
        "SIGTERM handler is not set because current thread",
        "Started a local Ray instance",
        "Connected to Ray cluster",
    ),
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


# The lines Ray forwards to a training driver from its processes (``log_to_driver``): our
# workers' (``RayTrainWorker``: the banner, the epoch lines) reach the console; every other
# batch (Ray Train's controller and its tracebacks, the placement-group cleaner's warnings, the
# raylet's "a worker died") goes to the run's ``ray.log`` instead, and so does a traceback a
# worker prints (the run's own one-line error and ``train.log`` say what failed).
OUR_ACTORS = ("RayTrainWorker",)
RAY_LOG_FILE = "ray.log"
_PRINTER = "ray_print_logs"  # the name ray.init gives its console handler


def keep_on_console(batch: dict) -> list[str]:
    """The lines of a forwarded batch that belong on the console: a worker's own lines up to
    any traceback it prints; nothing of any other process."""
    if batch.get("actor_name") not in OUR_ACTORS and batch.get("task_name") not in OUR_ACTORS:
        return []
    lines = list(batch.get("lines") or [])
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            return lines[:i]
    return lines


def route_worker_logs(log_path: str | None) -> Callable[[], None]:
    """Route what Ray forwards to this driver: :func:`keep_on_console`'s lines through Ray's
    own printer, the rest appended to ``log_path`` (a local file; None: dropped, Ray's session
    logs keep them).  Covers both of Ray's paths to the console: the printer ``ray.init``
    registers for the processes' output, and the raylet's error messages ("a worker died"),
    which Ray prints directly.  Returns the undo; a Ray without those hooks is left alone."""
    try:
        from ray._private import worker as ray_worker
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return lambda: None
    printers = [h for name, h in dispatcher.handlers if name == _PRINTER]
    direct = getattr(ray_worker, "print_to_stdstream", None)
    if not printers or direct is None:
        return lambda: None
    printer = printers[0]

    def to_log(batch: dict, lines: list[str]) -> None:
        if not lines or not log_path:
            return
        who = batch.get("actor_name") or batch.get("task_name") or batch.get("pid")
        try:
            with open(log_path, "a", encoding="utf-8") as fh:
                fh.writelines(f"({who} pid={batch.get('pid')}) {line}\n" for line in lines)
        except OSError:
            pass  # a log of Ray's noise is not worth failing the run over

    def route(batch: dict, print_kept: Callable[[dict], None]) -> None:
        kept = keep_on_console(batch)
        if kept:
            print_kept({**batch, "lines": kept})
        to_log(batch, list(batch.get("lines") or [])[len(kept) :])

    def direct_route(batch: dict, ignore_prefix: bool) -> None:
        route(batch, lambda b: direct(b, ignore_prefix))

    dispatcher.remove_handler(_PRINTER)
    dispatcher.add_handler(_PRINTER, lambda batch: route(batch, printer))
    ray_worker.print_to_stdstream = direct_route

    def undo() -> None:
        ray_worker.print_to_stdstream = direct
        if any(name == _PRINTER for name, _ in dispatcher.handlers):
            dispatcher.remove_handler(_PRINTER)
            dispatcher.add_handler(_PRINTER, printer)

    return undo
