"""The server's own keys (``serve.*``), read from ``key=value`` arguments.

Every other argument of ``python -m cmpnn_dist.serve`` is either one of the prediction keys
(``ckpt``, ``weights``, ``graph``, ``device``, as in ``python -m cmpnn_dist.predict``) or a
config override handed to the checkpoint's configuration (``storage_root=...``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from cmpnn_dist.errors import UsageError


@dataclass
class ServeSettings:
    """What ``python -m cmpnn_dist.serve`` runs.

    ``host`` / ``port``: where the HTTP proxy listens (loopback unless told otherwise);
    ``replicas``: model copies, each a Ray actor with ``cpus_per_replica`` CPUs (and as many
    torch threads); ``batching``: concurrent ``/predict`` requests of one replica share one
    forward pass, up to ``max_batch_size`` requests, gathered for at most ``batch_wait_ms``
    after the first; ``max_body_bytes``: larger request bodies are refused (413);
    ``max_k``: the most answers one request may ask for; ``explain_replicas``: model copies
    answering ``/explain`` (a deployment of their own, one explanation at a time each);
    ``max_explain_queue``: explanations that may wait for one of them (per ``/predict``
    replica), more are refused (503).
    """

    ckpt: str = ""
    weights: str = "best"
    graph: str = "train"
    device: str = "cpu"
    overrides: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = 8000
    replicas: int = 1
    cpus_per_replica: float = 1.0
    batching: bool = True
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_ongoing_requests: int = 64
    max_body_bytes: int = 16384
    max_k: int = 1000
    explain_replicas: int = 1
    max_explain_queue: int = 16
    cwd: str = ""  # the launcher's working directory: relative paths resolve against it


SERVE_KEYS = [f"serve.{f.name}" for f in fields(ServeSettings)[5:] if f.name != "cwd"]
PREDICT_KEYS = ["ckpt", "weights", "graph", "device"]
LOW = {
    "port": 1,
    "replicas": 1,
    "cpus_per_replica": 0.0,
    "max_batch_size": 1,
    "batch_wait_ms": 0.0,
    "max_ongoing_requests": 1,
    "max_body_bytes": 64,
    "max_k": 1,
    "explain_replicas": 1,
    "max_explain_queue": 1,
}


def _parse(name: str, text: str, kind: type) -> Any:
    key = f"serve.{name}"
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise UsageError(f"{key}={text!r}: choose true or false")
        return text.lower() == "true"
    if kind is str:
        if not text:
            raise UsageError(f"{key} is empty")
        return text
    try:
        value = kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise UsageError(f"{key}={text!r}: expected {what}") from None
    if value < LOW[name]:
        raise UsageError(f"{key}={value}: must be >= {LOW[name]}")
    if name == "port" and value > 65535:
        raise UsageError(f"{key}={value}: must be <= 65535")
    return value


def settings_from(special: dict[str, str], overrides: list[str], cwd: str) -> ServeSettings:
    """Settings from the ``key=value`` pairs pulled out by :func:`cmpnn_dist.cli.split_args`
    (``special``) and the remaining config ``overrides``."""
    if "ckpt" not in special:
        raise UsageError("ckpt= is missing: python -m cmpnn_dist.serve ckpt=PATH [serve.port=N]")
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+")
        if key.startswith("serve."):
            close = difflib.get_close_matches(key, SERVE_KEYS, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise UsageError(f"unknown key {key!r}{hint}")
    s = ServeSettings(ckpt=special["ckpt"], overrides=list(overrides), cwd=cwd)
    if special.get("weights", "best") not in ("best", "last"):
        raise UsageError(f"weights={special['weights']!r}: choose best or last")
    if special.get("device", "cpu") not in ("cpu", "cuda"):
        raise UsageError(f"device={special['device']!r}: choose cpu or cuda")
    s.weights = special.get("weights", s.weights)
    s.graph = special.get("graph", s.graph)
    s.device = special.get("device", s.device)
    kinds = {"host": str, "batching": bool, "cpus_per_replica": float, "batch_wait_ms": float}
    for key in SERVE_KEYS:
        if key in special:
            name = key.removeprefix("serve.")
            setattr(s, name, _parse(name, special[key], kinds.get(name, int)))
    if s.max_ongoing_requests < s.max_batch_size:
        raise UsageError(
            f"serve.max_ongoing_requests={s.max_ongoing_requests} is below "
            f"serve.max_batch_size={s.max_batch_size}: a batch could never fill"
        )
    return s
