"""Runtime settings that must be in place before torch starts using them: OpenMP's wait
policy, torch's huge-page allocation and glibc malloc's reuse of large blocks.

libgomp reads ``OMP_WAIT_POLICY`` once, when it is loaded (``import torch``).  Its default
lets a thread that reaches the end of a parallel region spin for a while (about 300,000
iterations) before sleeping.  The CPU message-passing path runs ~1,500 short parallel regions per
training step; on a machine where another process holds a core, the spinning thread burns the
time slice its partner (or the other process) needs, and a 2-thread step on fb237_v1 went from
~1 s to 50-70 s per batch (``benchmarks/results/step/train_speed_cpu.md``).  ``PASSIVE`` makes
waiting threads sleep at once; on an idle machine it costs a futex wake per region.

``THP_MEM_ALLOC_ENABLE=1`` makes torch's CPU allocator back every allocation of 2 MiB or more
with transparent huge pages (``madvise``; the kernel's default THP mode here).  torch's CPU
allocator does not cache: each large tensor is fresh memory, and with 4 KiB pages every first
touch is a page fault.  A PNA layer at a tenth of biokg scale writes ~0.6 GB of fresh outputs
per forward; the faults took about a third of the compiled kernel's forward (0.31 -> 0.19
CPU-s; a 100 MB allocate-and-fill: 35 -> 5 ms; ``benchmarks/results/ops/cpu_kernel_thp.md``).
torch reads the variable at its first large allocation.

glibc's malloc is what torch's CPU allocator calls, and it serves a request above its mmap
threshold (at most 32 MiB, raised only dynamically) with a fresh ``mmap`` that ``free`` hands
straight back with ``munmap``.  A dense step's [N, B, d] states are larger than that (WN18RR,
B = 16, d = 32: 84 MB each, about 90 of them a step), so every step the kernel maps, zeroes and
unmaps gigabytes of pages: huge pages where the range is 2 MiB aligned, 4 KiB pages at the
edges of each mapping.  That zeroing and the faults, left alone, are most of a dense step's CPU
time, as system time.  :data:`MALLOC_DEFAULTS` keeps such memory in the heap and reuses it the
next step: requests up to 1 GiB come from the heap (``M_MMAP_THRESHOLD``), a free never shrinks
it (``M_TRIM_THRESHOLD``), and every thread allocates from the one main heap (``M_ARENA_MAX``:
a thread's own arena cannot hold a chunk above 64 MiB and would ``mmap`` it anyway -- Ray Train
runs the training loop in a thread).  The price is memory: like a caching allocator, the heap
keeps its high-water mark, which fragmentation puts above the step's live peak (torch asks for
aligned blocks, and glibc's ``memalign`` cannot reuse a freed block of exactly the size asked,
so the heap grows until freed blocks merge) (peak resident sets per graph:
``benchmarks/results/step/malloc_faults_cpu.md``).  The math is untouched.  :func:`tune_malloc`
applies it in this process with ``mallopt`` (glibc only; elsewhere nothing changes); child
processes get the same as glibc's ``MALLOC_*`` variables from :func:`openmp_env`, which glibc
reads when a process starts.  ``CMPNN_DIST_MALLOC=0`` keeps glibc's defaults, and a
``MALLOC_*`` variable (or a ``glibc.malloc`` tunable) the user set wins.

This module imports nothing heavy, so the CLI entry points can call
:func:`set_openmp_defaults` before torch is imported; Ray workers get the same variables
through their runtime environment (``cmpnn_dist/distributed/driver.py``).  A value the user
set already is kept.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import MutableMapping

OPENMP_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"}

MALLOC_SWITCH = "CMPNN_DIST_MALLOC"  # "0": glibc's own malloc parameters
MALLOC_MMAP_THRESHOLD = 1 << 30  # bytes: larger requests still get their own mapping
# glibc's variable -> (mallopt parameter, value given to mallopt); -1 disables trimming
_MALLOPT: dict[str, tuple[int, int]] = {
    "MALLOC_MMAP_THRESHOLD_": (-3, MALLOC_MMAP_THRESHOLD),  # M_MMAP_THRESHOLD
    "MALLOC_TRIM_THRESHOLD_": (-1, -1),  # M_TRIM_THRESHOLD
    "MALLOC_ARENA_MAX": (-8, 1),  # M_ARENA_MAX
}
MALLOC_DEFAULTS: dict[str, str] = {
    "MALLOC_MMAP_THRESHOLD_": str(MALLOC_MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 62),  # as a variable: never reached, never trims
    "MALLOC_ARENA_MAX": "1",
}


def _malloc_tuned(environ: MutableMapping[str, str]) -> bool:
    return environ.get(MALLOC_SWITCH, "1") != "0"


def openmp_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The variables a training process should start with: the user's, else ours
    (:data:`OPENMP_DEFAULTS`, and :data:`MALLOC_DEFAULTS` unless ``CMPNN_DIST_MALLOC=0``)."""
    environ = os.environ if environ is None else environ
    defaults = dict(OPENMP_DEFAULTS)
    if _malloc_tuned(environ) and "glibc.malloc." not in environ.get("GLIBC_TUNABLES", ""):
        defaults.update(MALLOC_DEFAULTS)
    return {k: environ.get(k, v) for k, v in defaults.items()}


def tune_malloc(environ: MutableMapping[str, str] | None = None) -> dict[str, int]:
    """Apply :data:`MALLOC_DEFAULTS` to this process's glibc malloc with ``mallopt``.

    Big tensors freed in one training step are then reused by the next one instead of being
    unmapped and faulted in again (see the module's docstring).  Skipped where the C library
    is not glibc, with ``CMPNN_DIST_MALLOC=0``, for each parameter whose ``MALLOC_*``
    variable is set (glibc read it at start) and altogether when ``GLIBC_TUNABLES`` names a
    ``glibc.malloc`` tunable.  Returns the parameters set, by variable name.  Call it before
    the process allocates much: memory already mapped keeps its old fate, and a thread that
    allocated already keeps its arena.
    """
    environ = os.environ if environ is None else environ
    if not _malloc_tuned(environ) or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return {}
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return {}
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # not glibc
        return {}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    applied = {}
    for key, (param, value) in _MALLOPT.items():
        if key not in environ and mallopt(param, value) == 1:
            applied[key] = value
    return applied


def set_openmp_defaults(environ: MutableMapping[str, str] | None = None) -> bool:
    """Put :data:`OPENMP_DEFAULTS` into ``environ`` (``os.environ``) where not set, and, for
    this process (``environ`` None), tune its malloc (:func:`tune_malloc`).

    Returns False when torch is already imported in this process (then OpenMP has read its
    environment and the setting only reaches child processes).
    """
    if environ is None:
        tune_malloc()
    environ = os.environ if environ is None else environ
    for key, value in OPENMP_DEFAULTS.items():
        environ.setdefault(key, value)
    return "torch" not in sys.modules
