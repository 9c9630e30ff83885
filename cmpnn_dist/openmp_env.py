"""Runtime settings that must be in the environment before torch starts using them: OpenMP's
wait policy and torch's huge-page allocation.

libgomp reads ``OMP_WAIT_POLICY`` once, when it is loaded (``import torch``).  Its default
lets a thread that reaches the end of a parallel region spin for a while (about 300,000
iterations) before sleeping.  The CPU message-passing path runs ~1,500 short parallel regions per
training step; on a machine where another process holds a core, the spinning thread burns the
time slice its partner (or the other process) needs, and a 2-thread step on fb237_v1 went from
~1 s to 50-70 s per batch (``benchmarks/results/train_speed_cpu.md``).  ``PASSIVE`` makes
waiting threads sleep at once; on an idle machine it costs a futex wake per region.

``THP_MEM_ALLOC_ENABLE=1`` makes torch's CPU allocator back every allocation of 2 MiB or more
with transparent huge pages (``madvise``; the kernel's default THP mode here).  torch's CPU
allocator does not cache: each large tensor is fresh memory, and with 4 KiB pages every first
touch is a page fault.  A PNA layer at a tenth of biokg scale writes ~0.6 GB of fresh outputs
per forward; the faults took about a third of the compiled kernel's forward (0.31 -> 0.19
CPU-s; a 100 MB allocate-and-fill: 35 -> 5 ms; ``benchmarks/results/cpu_kernel_thp.md``).
torch reads the variable at its first large allocation.

This module imports nothing heavy, so the CLI entry points can call
:func:`set_openmp_defaults` before torch is imported; Ray workers get the same variables
through their runtime environment (``cmpnn_dist/distributed/driver.py``).  A value the user
set already is kept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

OPENMP_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"}


def openmp_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The OpenMP variables a training process should start with: the user's, else ours."""
    environ = os.environ if environ is None else environ
    return {k: environ.get(k, v) for k, v in OPENMP_DEFAULTS.items()}


def set_openmp_defaults(environ: MutableMapping[str, str] | None = None) -> bool:
    """Put :data:`OPENMP_DEFAULTS` into ``environ`` (``os.environ``) where not set.

    Returns False when torch is already imported in this process (then OpenMP has read its
    environment and the setting only reaches child processes).
    """
    environ = os.environ if environ is None else environ
    for key, value in OPENMP_DEFAULTS.items():
        environ.setdefault(key, value)
    return "torch" not in sys.modules
