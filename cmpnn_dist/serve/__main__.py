"""``python -m cmpnn_dist.serve ckpt=PATH [serve.port=8000] [serve.host=127.0.0.1] ...``

Serves a trained checkpoint over HTTP with Ray Serve until Ctrl-C or SIGTERM: ``POST
/predict`` (ranked tails), ``POST /explain`` (paths and their edge weights), ``GET /health``,
``GET /entities?prefix=``, ``GET /relations`` and the page at ``/``.

Keys: ``ckpt`` (a checkpoint or run folder), ``weights=best|last``, ``graph=train|test``,
``device=cpu|cuda``; ``serve.host`` (127.0.0.1), ``serve.port`` (8000), ``serve.replicas``
(1), ``serve.cpus_per_replica`` (1), ``serve.batching`` (true), ``serve.max_batch_size``
(32), ``serve.batch_wait_ms`` (5), ``serve.max_ongoing_requests`` (64),
``serve.max_body_bytes`` (16384), ``serve.max_k`` (1000).  Any other ``key=value`` is a
config override of the checkpoint's configuration (e.g. ``storage_root=...``).  Once the
replicas answer, one line names the URL; on exit, one JSON line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()  # before torch loads OpenMP (see cmpnn_dist/openmp_env.py)

from cmpnn_dist.cli import run_cli, split_args  # noqa: E402
from cmpnn_dist.serve.settings import PREDICT_KEYS, SERVE_KEYS, settings_from  # noqa: E402

HELP_CONFIG_KEYS = False


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, PREDICT_KEYS + SERVE_KEYS)
    settings = settings_from(special, overrides, os.getcwd())

    from cmpnn_dist.predict import Predictor
    from cmpnn_dist.serve import launch

    # the checkpoint, its data and the overrides, checked here: an error is one line before
    # any Ray process starts
    Predictor.from_checkpoint(
        settings.ckpt, settings.overrides, settings.weights, settings.graph, settings.device
    )
    stopped = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stopped.set()

    start = time.perf_counter()
    url = launch.start(settings)
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which sets its own
            signal.signal(sig, on_signal)
        print(
            f"serving {settings.ckpt} at {url} ({settings.replicas} replica(s), batching "
            f"{'on' if settings.batching else 'off'}); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        while not stopped.wait(1.0):
            pass
    finally:
        launch.stop()
    return {"url": url, "stopped_by": received[0], "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    sys.exit(run_cli(_main))


if __name__ == "__main__":
    main()
