"""Where the Ray and the DDP process group this project starts listen: one address, by default
the loopback one (``cluster.host`` for training, sweeps, evaluation and batch scoring; the
server's Ray always uses it).

How Ray 2.x decides its listening addresses, and what this module does about each:

* ``ray.init(_node_ip_address=...)`` passes the node address to the GCS server, the raylet,
  the agents and every worker (``--node-ip-address``); their C++ gRPC servers listen on every
  interface unless that address is a loopback one, the dashboard agent on every interface
  unless it is, the runtime-env agent on it.  But ``ray.init`` replaces a loopback address
  by the machine's outward one (``services.resolve_ip_for_localhost``) unless
  ``ray_constants.ENABLE_RAY_CLUSTER`` is false, which is read once, from
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``, when ``ray`` is imported.  :func:`init_local_ray`
  sets that variable (so the GCS, raylet, agents and workers it spawns, which import ``ray``
  afresh, keep the loopback address: workers compute DDP's master address from it) and the
  constant of this process for the duration of ``ray.init`` only (a later connection to a
  cluster from this process resolves addresses as Ray does).
* DDP: Ray Train's ``TorchConfig`` has rank 0 host torch's ``TCPStore``, which binds every
  interface whatever address it is given; gloo's pairs listen on the interface the
  machine's host name resolves to.  :func:`torch_config` returns, when the Ray is on the
  loopback address, a ``TorchConfig`` whose backend first starts the store in rank 0 on a
  socket bound to that address (torch's own rendezvous in the same process then reuses it:
  a multi-tenant store on the same port), and :func:`worker_env` names the loopback
  interface for gloo and nccl (``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

LOOPBACK = "127.0.0.1"
ENV_ENABLE_CLUSTER = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # read by ray._private.ray_constants


def is_loopback(host: str | None) -> bool:
    """True for ``127.x.x.x``, ``::1`` and ``localhost``."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """True for the any-address forms (``0.0.0.0``, ``::``): a bind address, not a node's."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def init_local_ray(host: str | None, **kwargs: Any) -> None:
    """``ray.init(address="local", include_dashboard=False, **kwargs)`` with every service of
    the new Ray on ``host`` (None: Ray's choice, the machine's outward address).

    Args:
        host: the node address; a loopback one keeps every port off the network.
        kwargs: more ``ray.init`` arguments (``num_cpus``, ``log_to_driver``...).
    """
    import ray
    from ray._private import ray_constants

    kwargs = {"address": "local", "include_dashboard": False, **kwargs}
    if host:
        kwargs["_node_ip_address"] = host
    if not is_loopback(host):
        ray.init(**kwargs)
        return
    saved_env, saved = os.environ.get(ENV_ENABLE_CLUSTER), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[ENV_ENABLE_CLUSTER] = "0"  # inherited by the processes ray.init spawns
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(**kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            os.environ.pop(ENV_ENABLE_CLUSTER, None)
        else:
            os.environ[ENV_ENABLE_CLUSTER] = saved_env


def ray_host() -> str:
    """The node address of the Ray this process is connected to."""
    import ray

    return ray.util.get_node_ip_address()


def loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux, ``lo0`` on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n.startswith("lo")), "lo")


def worker_env(host: str) -> dict[str, str]:
    """Environment for DDP workers of a Ray on ``host``: gloo and nccl on the loopback
    interface when ``host`` is a loopback address (else nothing: their own choice)."""
    if not is_loopback(host):
        return {}
    lo = loopback_interface()
    return {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo}


def serve_replica_on_node_address() -> None:
    """In a Ray Serve replica of a Ray on a loopback address: the replica's inter-deployment
    gRPC server, which Ray Serve 2.x binds to ``[::]:0`` (every interface) whatever the node
    address, binds that address instead.  Call it from the deployment's constructor: Serve
    starts that server once the constructor has returned.  A Ray without that function
    (another release) is left as it is."""
    import ray

    try:
        from ray.serve._private import replica
    except ImportError:
        return
    host = ray.util.get_node_ip_address()
    original = getattr(replica, "add_port_to_grpc_server", None)
    if original is None or not is_loopback(host) or getattr(original, "on_node", False):
        return

    def add_port(server: Any, address: str) -> int:
        if address.startswith("[::]:"):
            address = f"{host}:{address.removeprefix('[::]:')}"
        return original(server, address)

    add_port.on_node = True  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = add_port


_HELD_STORES: list[Any] = []  # rank 0's store server, alive while its process group is


def _start_store(host: str, world_size: int, timeout_s: int) -> int:
    """In rank 0: a ``TCPStore`` server on a socket bound to ``host``; returns its port."""
    from datetime import timedelta

    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    store = dist.TCPStore(
        host, port, world_size, is_master=True, timeout=timedelta(seconds=timeout_s),
        wait_for_workers=False, multi_tenant=True, master_listen_fd=sock.detach(),
    )  # fmt: skip
    _HELD_STORES[:] = [store]
    return port


def torch_config(backend: str, timeout_s: int, host: str) -> Any:
    """Ray Train's ``TorchConfig`` for ``backend``; on a loopback ``host``, one whose rank 0
    hosts the rendezvous store on ``host`` only (see the module doc)."""
    from ray.train.torch import TorchConfig

    if not is_loopback(host):
        return TorchConfig(backend=backend, timeout_s=timeout_s)
    from dataclasses import dataclass

    from ray.train.torch.config import (
        V1WorkerGroup,
        _set_torch_distributed_env_vars,
        _setup_torch_process_group,
        _TorchBackend,
    )

    class _Backend(_TorchBackend):
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            import ray

            n = len(worker_group)
            port = worker_group.execute_single(0, _start_store, host, n, backend_config.timeout_s)

            def set_env() -> None:
                os.environ.update(MASTER_ADDR=host, MASTER_PORT=str(port))

            worker_group.execute(set_env)
            if not isinstance(worker_group, V1WorkerGroup):  # as Ray's own backend does
                worker_group.execute(_set_torch_distributed_env_vars)
            ray.get([
                worker_group.execute_single_async(
                    i, _setup_torch_process_group, backend=backend, world_rank=i,
                    world_size=n, init_method="env://", timeout_s=backend_config.timeout_s,
                )
                for i in range(n)
            ])  # fmt: skip

    @dataclass
    class _Config(TorchConfig):
        @property
        def backend_cls(self) -> type:
            return _Backend

    return _Config(backend=backend, timeout_s=timeout_s)
