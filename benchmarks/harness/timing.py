"""How the benchmarks time what they compare.

- :func:`timed`: the median of ``reps`` timed calls after ``warmup`` untimed ones (CUDA
  synchronised around each call, so the time is the device's, not the launch's);
- :func:`interleaved`: several cases measured in rounds, each round running every case once,
  the order rotated from round to round, so that a change of load during the run falls on
  every case alike rather than on whichever ran last; :func:`medians` of the rounds;
- :func:`cpu_seconds`: user + system CPU seconds of this process (and, optionally, its waited
  children), the measure that holds on a busy machine where wall time does not;
- :class:`RssPeak`: the peak resident set size while a block runs.
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import torch

T = TypeVar("T")


def cpu_seconds(children: bool = False) -> float:
    """User + system CPU seconds used so far by this process (plus its waited-for children
    when ``children``)."""
    who = [resource.RUSAGE_SELF] + ([resource.RUSAGE_CHILDREN] if children else [])
    return sum(resource.getrusage(w).ru_utime + resource.getrusage(w).ru_stime for w in who)


def interleaved(
    cases: Mapping[str, Callable[[], T]],
    rounds: int,
    rotate: bool = True,
    progress: Callable[[int, dict[str, T]], None] | None = None,
) -> dict[str, list[T]]:
    """Each case's result per round, ``rounds`` rounds of every case once.

    With ``rotate`` the first case of round ``r`` is the ``r``-th (mod the number of cases):
    no case always runs first, when the caches are cold, or last.  ``progress(r, results)``
    is called after each round with that round's results."""
    names = list(cases)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names) if rotate else 0
        this: dict[str, T] = {}
        for name in names[k:] + names[:k]:
            this[name] = cases[name]()
            out[name].append(this[name])
        if progress is not None:
            progress(r, {name: this[name] for name in names})
    return out


def medians(rounds: Mapping[str, list[float]]) -> dict[str, float]:
    """The median over rounds of each case's figure."""
    return {name: statistics.median(values) for name, values in rounds.items()}


def timed(fn: Callable[[], object], dev: str, reps: int, warmup: int) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after ``warmup`` untimed ones."""
    times = []
    for i in range(warmup + reps):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class RssPeak:
    """Peak resident set size (bytes) of this process while the context is open."""

    def __enter__(self) -> RssPeak:
        self.base = self.peak = self._rss()
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._t.join()
        self.peak = max(self.peak, self._rss())
