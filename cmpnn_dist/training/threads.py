"""How many intra-op (OpenMP) threads a CPU training process uses: ``train.num_threads``.

Why it matters: the CPU message-passing path runs many short parallel regions per step (a
gather, a multiply and a scatter-add per destination-row block, per layer, forward and
backward: ~1,500 per step on fb237_v1 at batch 64).  Each region splits its work statically
over the team and ends at a barrier.  When another process holds one of the cores, the thread
that loses its core holds up every region until the scheduler gives it a slice, so a 2-thread
step becomes a chain of scheduler waits (measured on the 2-core box: 0.9 to 55 s per batch
where one thread takes 0.9 s; ``benchmarks/results/step/train_speed_cpu.md``).  With one thread per
*free* core there is nothing to wait for.

Policy (``train.num_threads=None``, the default): use the cores this process may run on
(``os.sched_getaffinity``, capped by ``cap``, e.g. Ray's ``cpus_per_worker``) that other
processes leave free, measured from ``/proc/stat`` over a short window minus this process's
own CPU time, and no more threads than the work has pieces of ``MIN_WORK_PER_THREAD``
elements.  :class:`ThreadGovernor` re-measures every ``interval_s`` seconds during training,
so a job that starts (or ends) beside the run changes the count within one interval.  That
is only done where the run's floats do not depend on the thread count
(:func:`~cmpnn_dist.training.reproducibility.thread_invariant`); elsewhere the count is fixed
for the run from the allowed cores and the work alone (the load is not read), and a resumed
run keeps the count its checkpoint recorded.  An integer ``train.num_threads`` fixes the
count (no re-measuring); ``train.deterministic`` already pins one thread.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)

# below this many elements per thread in a layer's state tensor [N, B, d], a second thread
# costs more in fork / barrier time than it saves (fb237_v1 at batch 8 is ~400 k elements)
MIN_WORK_PER_THREAD = 1 << 16
# a core counts as free when other processes use less than this fraction of it
BUSY_FRACTION = 0.5


def allowed_cpus(cap: float | None = None) -> int:
    """Cores this process may run on (affinity mask), at most ``ceil(cap)`` when given."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        n = os.cpu_count() or 1
    if cap is not None and cap > 0:
        n = min(n, max(1, math.ceil(cap)))
    return max(1, n)


def choose_num_threads(allowed: int, others_busy: float, work_elements: int | None) -> int:
    """The decision, as a pure function.

    Args:
        allowed: cores this process may use (>= 1).
        others_busy: cores' worth of CPU time other processes used recently (0 = idle box;
            1.0 = one core fully busy).  Only the busy time on *our* allowed cores matters,
            but /proc/stat does not say which; on a box shared with others this is
            conservative.
        work_elements: elements of the largest per-op tensor (N * B * d); None: no limit.

    Returns:
        ``max(1, min(allowed - busy cores, work_elements // MIN_WORK_PER_THREAD))`` where a
        core is busy once others use ``BUSY_FRACTION`` of it.
    """
    busy = math.floor(max(0.0, others_busy) + (1.0 - BUSY_FRACTION))
    n = max(1, int(allowed) - busy)
    if work_elements is not None:
        n = min(n, max(1, int(work_elements) // MIN_WORK_PER_THREAD))
    return max(1, n)


def _cpu_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies summed over all cores, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    vals = [int(v) for v in fields[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    total = sum(vals[:8])  # guest time is already counted in user
    return total - idle, total


@dataclass
class LoadSample:
    """A /proc/stat reading and this process's CPU time at one instant."""

    jiffies: tuple[int, int] | None
    own_cpu_s: float
    wall_s: float

    @classmethod
    def now(cls) -> LoadSample:
        return cls(_cpu_jiffies(), time.process_time(), time.monotonic())


def others_busy_since(before: LoadSample, after: LoadSample) -> float | None:
    """Cores' worth of CPU that processes other than this one used between two samples."""
    if before.jiffies is None or after.jiffies is None:
        return None
    busy = after.jiffies[0] - before.jiffies[0]
    total = after.jiffies[1] - before.jiffies[1]
    wall = after.wall_s - before.wall_s
    if total <= 0 or wall <= 0:
        return None
    ncpu = os.cpu_count() or 1
    all_busy = ncpu * busy / total  # cores' worth, all processes
    own = (after.own_cpu_s - before.own_cpu_s) / wall
    return max(0.0, all_busy - own)


def measure_others_busy(window_s: float = 0.1) -> float | None:
    """Cores' worth of CPU used by other processes over the next ``window_s`` seconds."""
    before = LoadSample.now()
    time.sleep(window_s)
    return others_busy_since(before, LoadSample.now())


class ThreadGovernor:
    """Sets ``torch.set_num_threads`` from :func:`choose_num_threads`, then keeps it current.

    Args:
        num_threads: ``train.num_threads``; an int fixes the count, None chooses it.
        work_elements: N * B * d of the training graph (the per-op work size).
        cap: at most this many threads (e.g. ``cluster.cpus_per_worker``); None: no cap.
        interval_s: re-measure at most this often (``update()`` is called once per step).
        follow_load: with ``num_threads`` None, follow the load (True: the run's floats do
            not depend on the thread count) or fix the count from the allowed cores and the
            work, ignoring the load (False).
    """

    def __init__(
        self,
        num_threads: int | None,
        work_elements: int | None = None,
        cap: float | None = None,
        interval_s: float = 5.0,
        follow_load: bool = True,
    ) -> None:
        self.fixed = num_threads
        self.work_elements = work_elements
        self.allowed = allowed_cpus(cap)
        self.interval_s = interval_s
        self.threads = torch.get_num_threads()
        self.changes: list[tuple[float, int, float | None]] = []  # (time, threads, others)
        self.invariant, self.not_invariant_because = follow_load, ""  # governor_for's answer
        # "config": train.num_threads / deterministic; "policy": fixed since the floats depend
        # on it; "load": chosen from the load
        self.mode = "config" if num_threads is not None else "load" if follow_load else "policy"
        self.earlier_used: list[int] = []  # counts of the run before a resume
        self._last = LoadSample.now()
        if num_threads is not None:
            if int(num_threads) < 1:
                raise ValueError(f"train.num_threads must be >= 1 or null, got {num_threads}")
            self._set(int(num_threads), None)
        elif not follow_load:  # the same count under any load: the floats depend on it
            self.fixed = self._decide(0.0)
            self._set(self.fixed, None)
        else:
            self._set(self._decide(measure_others_busy()), None)
            self._last = LoadSample.now()

    @property
    def follows_load(self) -> bool:
        """Whether ``update()`` may change the count."""
        return self.fixed is None

    def used(self) -> list[int]:
        """The thread counts the run has set, sorted (before a resume too)."""
        return sorted({n for _, n, _ in self.changes} | set(self.earlier_used))

    def resume(self, saved: dict[str, Any] | None) -> None:
        """Continue the run whose checkpoint recorded ``saved`` (:meth:`record`): a count the
        policy fixed stays the recorded one (the floats depend on it)."""
        saved = saved or {}
        self.earlier_used = [int(n) for n in saved.get("threads_used") or []]
        if self.mode == "policy" and isinstance(saved.get("threads"), int):
            self.changes.clear()  # no step ran with the count chosen before the resume
            self.fixed = int(saved["threads"])
            self._set(self.fixed, None)

    def record(self) -> dict[str, Any]:
        """What the run's floats depend on (:func:`~.reproducibility.record`)."""
        from .reproducibility import record

        threads = "load" if self.mode == "load" else self.threads
        return record(self.invariant, self.not_invariant_because, threads, self.used())

    def _decide(self, others: float | None) -> int:
        return choose_num_threads(self.allowed, others or 0.0, self.work_elements)

    def _set(self, n: int, others: float | None) -> None:
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
            logger.info("intra-op threads -> %d (others busy: %s cores)", n, others)
        self.threads = n
        self.changes.append((time.monotonic(), n, others))

    def update(self) -> int:
        """Re-measure if ``interval_s`` has passed (auto mode only); returns the thread count."""
        if self.fixed is not None:
            return self.threads
        now = LoadSample.now()
        if now.wall_s - self._last.wall_s < self.interval_s:
            return self.threads
        others = others_busy_since(self._last, now)
        self._last = now
        if others is not None:
            n = self._decide(others)
            if n != self.threads:
                self._set(n, others)
        return self.threads


def work_elements(num_nodes: int, batch: int, hidden_dim: int) -> int:
    """Elements of one layer's node states [N, B, d]: the size of each op's work."""
    return int(num_nodes) * int(batch) * int(hidden_dim)


def governor_for(cfg: Any, data: Any, world_size: int = 1) -> ThreadGovernor:
    """The :class:`ThreadGovernor` of a training run (``fit`` calls this once).

    ``train.deterministic`` pins one thread; Ray workers (``cluster.num_workers > 0`` on CPU)
    use at most ``cluster.cpus_per_worker`` threads, the CPUs Ray reserved for them.  The
    count follows the load only where the run is thread-invariant (``invariant``,
    ``not_invariant_because``: that answer).
    """
    from .reproducibility import thread_invariant

    tc = cfg.train
    fixed = 1 if tc.deterministic else tc.num_threads
    cap = None
    if cfg.cluster.num_workers > 0 and not cfg.cluster.use_gpu:
        cap = cfg.cluster.cpus_per_worker
    batch = max(1, tc.batch_size // max(1, world_size))
    work = work_elements(data.num_nodes, batch, cfg.model.hidden_dim)
    invariant, why = thread_invariant(cfg)
    governor = ThreadGovernor(fixed, work_elements=work, cap=cap, follow_load=invariant)
    governor.invariant, governor.not_invariant_because = invariant, why
    return governor
