"""Start and stop the application: a local Ray, Serve's HTTP proxy on ``host:port``, the
replicas; every failure before the first request is one :class:`UsageError` line.

The Ray this starts is this process's own (``address="local"``, its processes watched by
:mod:`cmpnn_dist.distributed.reaper` in case this process is killed); its internal services
listen on the loopback interface.  The HTTP proxy listens on ``serve.host`` only.

Signals (:mod:`.signals`): ``ray.init`` runs in a helper thread, where Ray installs no
SIGTERM handler in Python (the one its core worker installs in C++ is replaced at once), so
the main thread keeps handling SIGINT / SIGTERM while Ray starts; :func:`stop` returns once
every process of this Ray has exited.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from cmpnn_dist.distributed.local_ray import LOOPBACK, init_local_ray
from cmpnn_dist.errors import UsageError
from cmpnn_dist.openmp_env import openmp_env
from cmpnn_dist.serve.settings import ServeSettings
from cmpnn_dist.serve.signals import Interrupt, StopSignals

APP_NAME = "cmpnn"
# Serve's proxy must answer its readiness / health checks within 5 / 10 s or it is replaced;
# on a loaded 2-core machine a starting proxy missed them for a minute: allow 60 s
SERVE_ENV = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "60",
}


# Ray's workers listen on ports 10002-19999 (its --min/max-worker-port defaults); its GCS,
# raylet and agents, like any process binding port 0, get one of the kernel's ephemeral range
RAY_WORKER_PORTS_END = 19999
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` (Linux's default where it cannot be read)."""
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def quiet_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now that no starting Ray can take before its user binds it.

    A port from ``bind(0)`` is in the ephemeral range, where the Ray a server starts (and any
    other process binding port 0) draws its own ports: between the choice and the server's
    bind, one of them may take it.  This draws above Ray's worker ports and below that range
    instead (falling back to ``bind(0)`` where no such gap exists)."""
    gap = range(RAY_WORKER_PORTS_END + 1, ephemeral_range()[0])
    for port in random.SystemRandom().sample(gap, min(len(gap), 100)):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_address(host: str, port: int) -> None:
    """``host:port`` must be free to listen on (else one line naming it)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"serve.host={host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(addr)
        except OSError as exc:
            what = "is in use" if exc.errno == errno.EADDRINUSE else f"fails: {exc.strerror}"
            raise UsageError(
                f"serve.host={host} serve.port={port}: listening there {what}"
            ) from None


def taken_while_starting(host: str, port: int) -> UsageError:
    """``host:port`` was free when the server began and taken by the time Serve bound it: by
    another process, or by this server's own Ray when the port is an ephemeral one."""
    low, high = ephemeral_range()
    why = (
        f"ports {low}-{high} are the kernel's ephemeral range, from which Ray's own processes "
        "draw theirs: choose one outside it"
        if low <= port <= high
        else "choose another"
    )
    return UsageError(
        f"serve.host={host} serve.port={port}: free when the server began, taken while its Ray "
        f"started; {why}, such as serve.port={quiet_port()}"
    )


def start(settings: ServeSettings, signals: StopSignals | None = None, attempts: int = 3) -> str:
    """Start Ray, Serve and the application; returns the URL it answers on.

    Ray gives its raylet 30 s to register; on a loaded machine that can pass, so a local
    start is tried up to ``attempts`` times.  ``signals``: the command's handlers; while Ray
    starts a signal is only recorded (:meth:`StopSignals.deferred`), and no further attempt
    follows one.  Whatever interrupts the start, :func:`stop` cleans up."""
    import ray
    from ray import serve

    from cmpnn_dist.distributed.ray_logs import quiet_ray_start
    from cmpnn_dist.serve.app import build_app

    if settings.port:
        check_address(settings.host, settings.port)
    need = (settings.replicas + settings.explain_replicas) * settings.cpus_per_replica
    num_cpus = max(os.cpu_count() or 1, int(need + 0.999))
    for key, value in SERVE_ENV.items():  # read by Serve's controller and proxy actors
        os.environ.setdefault(key, value)
    env = {**openmp_env(), "OMP_NUM_THREADS": str(max(1, int(settings.cpus_per_replica)))}
    quiet_ray_start()
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its "app ready" and such
    for attempt in range(1, attempts + 1):
        try:
            _off_main_thread(
                signals,
                init_local_ray,
                host=LOOPBACK,
                num_cpus=num_cpus,
                log_to_driver=False,
                runtime_env={"env_vars": env},
            )
            break
        except Exception as exc:  # noqa: BLE001 - a start-up timeout, a full /tmp...: one line
            ray.shutdown()
            if signals is not None and signals.signum is not None:
                raise Interrupt from None
            if attempt == attempts:
                raise UsageError(
                    f"could not start a local Ray ({attempts} attempts; "
                    f"{type(exc).__name__}: {exc})"
                ) from None
    _watch()
    if settings.port:
        try:
            check_address(settings.host, settings.port)
        except UsageError:
            stop()
            raise taken_while_starting(settings.host, settings.port) from None
    try:
        serve.start(
            http_options={"host": settings.host, "port": settings.port},
            logging_config={"log_level": "WARNING"},
        )
        serve.run(build_app(settings), name=APP_NAME, route_prefix="/")
        _started["app"] = True  # answering: stop() lets its replicas finish what they hold
    except Exception as exc:  # noqa: BLE001 - e.g. a replica that failed to load the model
        stop()
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        if lines and "Failed to bind" in lines[-1]:  # taken after the check above
            raise taken_while_starting(settings.host, settings.port) from None
        raise UsageError(
            f"the server did not start: {lines[-1] if lines else type(exc).__name__}"
        ) from None
    return f"http://{settings.host}:{settings.port}/"


def _off_main_thread(signals: StopSignals | None, init: Callable[..., Any], **kwargs: Any) -> None:
    """``init(**kwargs)`` (``ray.init``) in a helper thread while the main thread waits for it,
    free to run the signal handlers: ``ray.init`` called there installs no SIGTERM handler in
    Python, and the one its core worker installs in C++ is replaced within 20 ms.

    The thread lives on until :func:`stop`: Ray starts its GCS and raylet with
    ``PR_SET_PDEATHSIG``, which kills them when the *thread* that started them ends."""
    done, release = threading.Event(), threading.Event()
    out: dict[str, BaseException] = {}

    def run() -> None:
        try:
            init(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            out["error"] = exc
        done.set()
        if not out:
            release.wait()

    thread = threading.Thread(target=run, name="serve-ray-start", daemon=True)
    with signals.deferred() if signals is not None else nullcontext():
        thread.start()
        while not done.wait(0.02):
            if signals is not None:
                signals.reclaim()  # from the C++ handler that Ray's core worker installs
        if signals is not None:
            signals.reclaim()
        if out:
            raise out["error"]
        _started["release"] = release


# what :func:`start` started, for :func:`stop`: the Ray session folder, the watcher, the app,
# the event that ends the thread that started Ray
_started: dict[str, Any] = {}


def _watch() -> None:
    """Stop this Ray's processes if this process dies without :func:`stop` (SIGKILL)."""
    try:
        import ray

        from cmpnn_dist.distributed.reaper import start_reaper

        session = ray._private.worker._global_node.get_session_dir_path()
        _started["session"] = session
        _started["reaper"] = start_reaper(session)
    except Exception:  # noqa: BLE001, S110 - a safety net, never fatal
        pass


def stop(grace_s: float = 10.0) -> None:
    """Shut the application (its replicas answer the requests they hold), Serve and Ray down;
    returns once every process of this Ray has exited (any left after ``grace_s`` seconds
    gets SIGKILL).  Does nothing when no Ray was started."""
    ray = sys.modules.get("ray")
    if ray is None:
        return
    started = dict(_started)
    _started.clear()
    try:
        if started.get("app") and ray.is_initialized():
            from ray import serve

            serve.delete(APP_NAME)  # serve.shutdown() would print the controller's own death
    except Exception:  # noqa: BLE001, S110 - Ray's shutdown below stops the replicas anyway
        pass
    finally:
        session = started.get("session") or _session_dir()
        ray.shutdown()
        _wait_for_exit(session, started.get("reaper"), grace_s)
        if "release" in started:
            started["release"].set()


def _session_dir() -> str | None:
    """The session folder of the Ray this process started (None when there is none)."""
    try:
        import ray

        return ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # noqa: BLE001 - no node: ray.init did not get that far
        return None


def _wait_for_exit(session: str | None, reaper: Any, grace_s: float) -> None:
    """Wait until no process names ``session`` on its command line but the watcher
    (``reaper``, which then exits by itself), SIGKILL what is left after ``grace_s``."""
    from cmpnn_dist.distributed.reaper import session_pids

    if session:
        mine = {reaper.pid} if reaper is not None else set()
        deadline = time.monotonic() + grace_s
        while left := [p for p in session_pids(session) if p not in mine]:
            if time.monotonic() > deadline:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                break
            time.sleep(0.1)
    if reaper is not None:
        try:
            reaper.wait(timeout=5.0)
        except Exception:  # noqa: BLE001 - it outlived its session: ours to end
            reaper.kill()
            reaper.wait()
