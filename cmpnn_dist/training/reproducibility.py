"""What the floats of a CPU training run depend on, and the record of it in the run folder.

On the CPU the training step's math does not depend on the intra-op thread count where the
run uses the compiled message-passing kernel (``cmpnn_dist/ops/cpu_kernel.cpp``: every output
summed in an order fixed by the graph) and the model's thread-invariant sums
(:mod:`cmpnn_dist.ops.ordered`): the C-MPNN family with a ``mul`` message (MSG 1 / MSG 2),
float32, MKL as torch's BLAS, no relation prior.  Then a run is a function of ``train.seed``,
the data, the config and the machine's software (torch and MKL versions, the CPU's
instruction set), whatever the load; the thread governor may follow the load freely.  Any
other configuration (the pure-torch message paths, whose indexing backward accumulates per
thread; bfloat16 autocast; another BLAS) is not known to be invariant, so its thread count
is fixed per run from the cores it may use, never from the load, and a resumed run reuses it.

:func:`record` is what the run folder keeps (``results.json`` and every checkpoint under
``"reproducibility"``).  ``tests/unit/training/test_determinism.py`` checks the invariant case: a
run with 1 thread, with 2, and with the count switched every step ends with the same weights.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import torch


def thread_invariant(cfg: Any) -> tuple[bool, str]:
    """``(True, "")`` when a CPU run of ``cfg`` gives the same floats for any thread count (the
    scope in the module docstring), else ``(False, why not)``."""
    m = cfg.model
    if _s(cfg.train.precision) != "fp32":
        return False, f"train.precision={cfg.train.precision} (only fp32 is thread-invariant)"
    if not torch.backends.mkl.is_available():
        return False, "torch's BLAS is not MKL (other BLAS libraries are not checked)"
    if _s(m.family) != "cmpnn":
        return False, f"model.family={m.family} (only cmpnn is thread-invariant)"
    if _s(m.prior) != "none":
        return False, f"model.prior={m.prior} (not checked)"
    if _s(m.propagation) == "pruned" and _s(m.prune.priority) != "decoder":
        return False, f"model.prune.priority={m.prune.priority} (not checked)"
    from cmpnn_dist.model import messages

    edge_message = messages.resolve(m.message).edge_message
    if edge_message != "mul":
        return False, f"model.message={m.message} runs the pure-torch message path"
    from cmpnn_dist.ops import resolve_impl

    try:
        impl = resolve_impl(_s(cfg.ops.impl), torch.zeros(1), message=edge_message)
    except ValueError as exc:  # the run itself will say so
        return False, str(exc)
    if impl != "cpu":
        return False, f"message passing runs ops impl {impl!r}, not the compiled kernel"
    return True, ""


def _s(value: Any) -> str:
    return str(getattr(value, "value", value))


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mkl_version() -> str:
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line:
            return line.strip(" -")
    return "none"


def record(invariant: bool, reason: str, threads: int | str, used: list[int]) -> dict[str, Any]:
    """The run folder's note of what the run's floats depend on.

    Args:
        invariant: :func:`thread_invariant`'s answer; reason: its reason when False.
        threads: ``"load"`` (the governor follows the load), or the fixed count.
        used: the thread counts the run's steps ran with (sorted, over every resume).
    """
    from cmpnn_dist.ops import cpu_build

    return {
        "thread_invariant": invariant,
        "not_invariant_because": reason or None,
        "threads": threads,
        "threads_used": used,
        "torch": str(torch.__version__),
        "blas": _mkl_version(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_kernel": cpu_build.status(),
        "python": platform.python_version(),
    }


__all__ = ["record", "thread_invariant"]
