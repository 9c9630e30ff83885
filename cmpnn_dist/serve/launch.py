"""Start and stop the application: a local Ray, Serve's HTTP proxy on ``host:port``, the
replicas; every failure before the first request is one :class:`UsageError` line.

The Ray this starts is this process's own (``address="local"``, its processes watched by
:mod:`cmpnn_dist.distributed.reaper` in case this process is killed); its internal services
listen on the loopback interface.  The HTTP proxy listens on ``serve.host`` only.
"""

from __future__ import annotations

import errno
import os
import random
import socket
from pathlib import Path

from cmpnn_dist.distributed.local_ray import LOOPBACK, init_local_ray
from cmpnn_dist.errors import UsageError
from cmpnn_dist.openmp_env import openmp_env
from cmpnn_dist.serve.settings import ServeSettings

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


def start(settings: ServeSettings, attempts: int = 3) -> str:
    """Start Ray, Serve and the application; returns the URL it answers on.

    Ray gives its raylet 30 s to register; on a loaded machine that can pass, so a local
    start is tried up to ``attempts`` times."""
    import ray
    from ray import serve

    from cmpnn_dist.serve.app import build_app

    if settings.port:
        check_address(settings.host, settings.port)
    need = settings.replicas * settings.cpus_per_replica
    num_cpus = max(os.cpu_count() or 1, int(need + 0.999))
    for key, value in SERVE_ENV.items():  # read by Serve's controller and proxy actors
        os.environ.setdefault(key, value)
    env = {**openmp_env(), "OMP_NUM_THREADS": str(max(1, int(settings.cpus_per_replica)))}
    for attempt in range(1, attempts + 1):
        try:
            init_local_ray(
                LOOPBACK, num_cpus=num_cpus, log_to_driver=False, runtime_env={"env_vars": env}
            )
            break
        except Exception as exc:  # noqa: BLE001 - a start-up timeout, a full /tmp...: one line
            ray.shutdown()
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
    except Exception as exc:  # noqa: BLE001 - e.g. a replica that failed to load the model
        stop()
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        if lines and "Failed to bind" in lines[-1]:  # taken after the check above
            raise taken_while_starting(settings.host, settings.port) from None
        raise UsageError(
            f"the server did not start: {lines[-1] if lines else type(exc).__name__}"
        ) from None
    return f"http://{settings.host}:{settings.port}/"


def _watch() -> None:
    """Stop this Ray's processes if this process dies without :func:`stop` (SIGKILL)."""
    try:
        import ray

        from cmpnn_dist.distributed.reaper import start_reaper

        start_reaper(ray._private.worker._global_node.get_session_dir_path())
    except Exception:  # noqa: BLE001, S110 - a safety net, never fatal
        pass


def stop() -> None:
    """Shut the application, Serve and Ray down."""
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()
