"""Fault injection for the fault-tolerance tests and drills (never active unless asked for).

``CMPNN_FAULT="<action>@rank<R>:step<S>[:always][,...]"`` makes worker ``R`` misbehave at the
start of its ``S``-th training forward pass (1-based, counted from the start of each attempt,
so in a fresh run it is the forward pass of global step ``S``):

* ``kill``  -- ``SIGKILL`` the worker process itself (a preempted / OOM-killed worker);
* ``stall`` -- sleep forever, so the other ranks wait in the next collective;
* ``crash`` -- raise :class:`InjectedFault` (an ordinary Python error in the worker);
* ``slow``  -- sleep ``CMPNN_FAULT_SLOW_S`` seconds (default 0.2) in this and every later
  training forward pass (a slow rank: the others wait for it, results are unchanged; the
  interrupt tests use it to keep a tiny run going long enough to be signalled).

``CMPNN_FAULT_DIR=<dir>`` makes each fault fire once per run: the first firing leaves
``<dir>/<action>-rank<R>-step<S>.fired`` behind and later attempts skip it, unless the item
ends in ``:always`` (to exhaust the retry budget).  Every attempt of every rank also appends
``rank<R> pid<P> node<N>`` to ``<dir>/attempts.log`` (:func:`log_attempt`).  Without the
directory faults fire every attempt.

The variables are read in the Ray worker; :func:`propagated_env` lists what the driver copies
into the workers' runtime environment.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from torch import nn

ENV_FAULT = "CMPNN_FAULT"
ENV_DIR = "CMPNN_FAULT_DIR"
ENV_SLOW_S = "CMPNN_FAULT_SLOW_S"
_SPEC = re.compile(r"^(kill|stall|crash|slow)@rank(\d+):step(\d+)(:always)?$")


class InjectedFault(RuntimeError):
    """The error raised by a ``crash`` fault."""


@dataclass(frozen=True)
class Fault:
    action: str
    rank: int
    step: int
    always: bool = False

    @property
    def tag(self) -> str:
        return f"{self.action}-rank{self.rank}-step{self.step}"


def parse_faults(spec: str) -> list[Fault]:
    """Parse ``CMPNN_FAULT``; raises ValueError naming the bad item."""
    faults = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = _SPEC.match(item)
        if not m:
            raise ValueError(
                f"{ENV_FAULT}: bad item {item!r}; "
                "expected kill|stall|crash|slow@rank<R>:step<S>[:always]"
            )
        faults.append(Fault(m.group(1), int(m.group(2)), int(m.group(3)), bool(m.group(4))))
    return faults


def propagated_env() -> dict[str, str]:
    """The fault variables set in this process (the driver forwards them to the workers)."""
    return {k: os.environ[k] for k in (ENV_FAULT, ENV_DIR, ENV_SLOW_S) if k in os.environ}


def _fire(fault: Fault, once_dir: Path | None) -> None:
    if once_dir is not None and not fault.always:
        marker = once_dir / f"{fault.tag}.fired"
        if marker.exists():
            return
        marker.write_text(f"pid {os.getpid()} at {time.time()}\n")
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "stall":
        while True:
            time.sleep(3600)
    raise InjectedFault(f"injected crash on rank {fault.rank} at step {fault.step}")


def log_attempt(rank: int, node: str = "") -> None:
    """Append ``rank<R> pid<P> node<N>`` to ``$CMPNN_FAULT_DIR/attempts.log`` (when set); the
    worker calls it first thing, so attempts that fail at start are counted too."""
    once = os.environ.get(ENV_DIR)
    if not once:
        return
    Path(once).mkdir(parents=True, exist_ok=True)
    with open(Path(once) / "attempts.log", "a") as f:
        f.write(f"rank{rank} pid{os.getpid()} node{node}\n")


def install(module: nn.Module, rank: int, evaluation: bool = False) -> None:
    """Attach the faults of ``CMPNN_FAULT`` meant for ``rank`` to ``module``'s forward
    (training forward passes; with ``evaluation``, the evaluation ones: step S is the S-th
    scored batch of a sharded evaluation)."""
    faults = [f for f in parse_faults(os.environ.get(ENV_FAULT, "")) if f.rank == rank]
    once = os.environ.get(ENV_DIR)
    once_dir = Path(once) if once else None
    if not faults:
        return
    calls = [0]

    def hook(mod: nn.Module, args: object) -> None:
        if mod.training == evaluation:
            return
        calls[0] += 1
        for fault in faults:
            if fault.action == "slow" and calls[0] >= fault.step:
                time.sleep(float(os.environ.get(ENV_SLOW_S, "0.2")))
            elif fault.step == calls[0]:
                _fire(fault, once_dir)

    module.register_forward_pre_hook(hook)
