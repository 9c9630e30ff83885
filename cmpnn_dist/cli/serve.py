"""``python -m cmpnn_dist.serve ckpt=PATH [serve.port=8000] [serve.host=127.0.0.1] ...``

Serves a trained checkpoint over HTTP with Ray Serve until Ctrl-C or SIGTERM (at any moment,
start-up included: Serve and its Ray are shut down, exit status 130 / 143): ``POST
/predict`` (ranked tails), ``POST /explain`` (paths and their edge weights), ``GET /health``,
``GET /entities?prefix=``, ``GET /relations`` and the page at ``/``.

Keys: ``ckpt`` (a checkpoint or run folder), ``weights=best|last``, ``graph=train|test``,
``device=cpu|cuda``; ``serve.host`` (127.0.0.1), ``serve.port`` (8000), ``serve.replicas``
(1), ``serve.cpus_per_replica`` (1), ``serve.batching`` (true), ``serve.max_batch_size``
(32), ``serve.batch_wait_ms`` (5), ``serve.max_ongoing_requests`` (64),
``serve.max_body_bytes`` (16384), ``serve.max_k`` (1000), ``serve.explain_replicas`` (1),
``serve.max_explain_queue`` (16).  Any other ``key=value`` is a
config override of the checkpoint's configuration (e.g. ``storage_root=...``).  Once the
replicas answer, one line names the URL; on exit, one JSON line.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from cmpnn_dist.cli.common import run_cli, split_args
from cmpnn_dist.serve import launch
from cmpnn_dist.serve.settings import PREDICT_KEYS, SERVE_KEYS, settings_from
from cmpnn_dist.serve.signals import ServerStopped, StopSignals

HELP_CONFIG_KEYS = False


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, PREDICT_KEYS + SERVE_KEYS)
    settings = settings_from(special, overrides, os.getcwd())
    start = time.perf_counter()
    url = None
    with StopSignals() as signals:  # from here on a signal stops the server (signals.py)
        try:
            with signals.interruptible():
                from cmpnn_dist.predict import Predictor

                # the checkpoint, its data and the overrides, checked here: an error is one
                # line before any Ray process starts
                Predictor.from_checkpoint(
                    settings.ckpt, settings.overrides, settings.weights, settings.graph,
                    settings.device,
                )  # fmt: skip
                url = launch.start(settings, signals)
                print(
                    f"serving {settings.ckpt} at {url} ({settings.replicas} replica(s), "
                    f"batching {'on' if settings.batching else 'off'}); Ctrl-C stops",
                    file=sys.stderr,
                    flush=True,
                )
            signals.wait()
        except KeyboardInterrupt:
            if signals.signum is None:  # not one of ours
                raise
        finally:
            with signals.deferred():
                launch.stop()
    assert signals.signum is not None
    result = {
        "url": url,
        "stopped_by": signal.Signals(signals.signum).name,
        "seconds": round(time.perf_counter() - start, 1),
    }
    raise ServerStopped(signals.signum, result, served=url is not None)


def main() -> None:
    sys.exit(run_cli(_main))
