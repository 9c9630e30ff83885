"""The intra-op thread policy (cmpnn_dist/training/threads.py) and the OpenMP defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cmpnn_dist.openmp_env import (
    MALLOC_DEFAULTS,
    MALLOC_SWITCH,
    OPENMP_DEFAULTS,
    openmp_env,
    set_openmp_defaults,
    tune_malloc,
)
from cmpnn_dist.ops import available_impls
from cmpnn_dist.training import threads as th


def _is_glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@pytest.fixture(autouse=True)
def _keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("allowed", "others", "work", "expected"),
    [
        (2, 0.0, None, 2),  # idle 2-core box: both cores
        (2, 0.3, None, 2),  # light background load does not take a core
        (2, 0.5, None, 1),  # half a core busy counts as busy
        (2, 1.0, None, 1),  # the other core busy: one thread
        (2, 1.7, None, 1),  # oversubscribed: never below one
        (2, 6.0, None, 1),
        (16, 3.2, None, 13),  # 3 busy cores of 16 (3.2 rounds to 3)
        (16, 3.6, None, 12),
        (8, 0.0, 3 * th.MIN_WORK_PER_THREAD, 3),  # work for 3 threads only
        (8, 0.0, th.MIN_WORK_PER_THREAD - 1, 1),  # tiny work: one thread
        (2, 0.0, 1594 * 64 * 32, 2),  # fb237_v1 at batch 64 has work for both cores
        (1, 0.0, None, 1),
    ],
)
def test_choose_num_threads(allowed, others, work, expected):
    assert th.choose_num_threads(allowed, others, work) == expected


def test_allowed_cpus_respects_affinity_and_cap():
    mask = len(os.sched_getaffinity(0))
    assert th.allowed_cpus() == mask
    assert th.allowed_cpus(cap=1.0) == 1
    assert th.allowed_cpus(cap=0.5) == 1  # a fractional Ray reservation still gets a thread
    assert th.allowed_cpus(cap=mask + 10) == mask


def test_others_busy_since_subtracts_own_cpu():
    ncpu = os.cpu_count()
    # over 1 s of wall, all cores together were busy 50% of the jiffies; this process used 0.4 s
    before = th.LoadSample((1000, 10000), own_cpu_s=1.0, wall_s=100.0)
    after = th.LoadSample((1000 + 500 * ncpu, 10000 + 1000 * ncpu), own_cpu_s=1.4, wall_s=101.0)
    assert th.others_busy_since(before, after) == pytest.approx(ncpu * 0.5 - 0.4)
    # our own busy time alone never reads as someone else's
    after = th.LoadSample((1000 + 100, 10000 + 1000 * ncpu), own_cpu_s=3.0, wall_s=101.0)
    assert th.others_busy_since(before, after) == 0.0
    assert th.others_busy_since(th.LoadSample(None, 0.0, 0.0), after) is None


def test_cpu_jiffies_reads_proc_stat():
    if not os.path.exists("/proc/stat"):
        pytest.skip("no /proc/stat on this OS")
    busy, total = th._cpu_jiffies()
    assert 0 <= busy <= total and total > 0


def test_governor_fixed_count_is_applied_and_never_changed():
    gov = th.ThreadGovernor(1, work_elements=10**9, interval_s=0.0)
    assert torch.get_num_threads() == 1 and gov.update() == 1
    with pytest.raises(ValueError, match="num_threads"):
        th.ThreadGovernor(0)


def test_governor_auto_follows_the_measured_load(monkeypatch):
    ncpu = os.cpu_count()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    readings = iter([0.0, 1.0 * ncpu, 0.0])  # idle, then every core busy, then idle again
    monkeypatch.setattr(th, "measure_others_busy", lambda window_s=0.1: next(readings))
    gov = th.ThreadGovernor(None, work_elements=None, cap=2, interval_s=0.0)
    assert gov.threads == 2 == torch.get_num_threads()
    monkeypatch.setattr(th, "others_busy_since", lambda a, b: next(readings))
    assert gov.update() == 1 == torch.get_num_threads()
    assert gov.update() == 2 == torch.get_num_threads()
    assert [n for _, n, _ in gov.changes] == [2, 1, 2]


def test_governor_for_reads_the_config():
    from cmpnn_dist.config import Config

    cfg = Config()
    cfg.train.batch_size = 64
    cfg.model.hidden_dim = 32
    cfg.cluster.num_workers, cfg.cluster.cpus_per_worker = 2, 1.0
    data = SimpleNamespace(num_nodes=1594)
    gov = th.governor_for(cfg, data, world_size=2)
    assert gov.allowed == 1 and gov.threads == 1  # capped by the Ray reservation
    assert gov.work_elements == 1594 * 32 * 32
    # the compiled kernel's run is thread-invariant: the count may follow the load
    assert gov.invariant == ("cpu" in available_impls()) and gov.follows_load == gov.invariant
    cfg.train.deterministic = True
    cfg.cluster.num_workers = 0
    assert th.governor_for(cfg, data).fixed == 1


def test_num_threads_is_a_config_key():
    from cmpnn_dist.cli.common import compose_config

    assert compose_config("default", []).train.num_threads is None
    assert compose_config("default", ["train.num_threads=1"]).train.num_threads == 1


def test_openmp_defaults_keep_the_users_value():
    env = {}
    set_openmp_defaults(env)
    assert env == OPENMP_DEFAULTS
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    set_openmp_defaults(env)
    assert env["OMP_WAIT_POLICY"] == "ACTIVE"
    assert openmp_env(env) == {**env, **MALLOC_DEFAULTS}  # what a worker starts with


def test_malloc_env_keeps_the_users_value_and_the_switch():
    assert openmp_env({"MALLOC_ARENA_MAX": "4"})["MALLOC_ARENA_MAX"] == "4"
    assert not set(MALLOC_DEFAULTS) & set(openmp_env({MALLOC_SWITCH: "0"}))
    tunables = {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}
    assert not set(MALLOC_DEFAULTS) & set(openmp_env(tunables))
    assert tune_malloc({MALLOC_SWITCH: "0"}) == {} and tune_malloc(tunables) == {}


# Allocate, touch and free 4 blocks of 40 MiB (above glibc's largest dynamic mmap threshold,
# 32 MiB) a round, in a thread (as Ray Train runs the loop), and print the minor faults of the
# 3rd round: with glibc's defaults each round maps fresh memory and faults it in again.
FAULT_PROBE = """
import ctypes, resource, sys, threading
if sys.argv[1] == "call":
    from cmpnn_dist.openmp_env import set_openmp_defaults
    set_openmp_defaults()  # what every entry point does before torch is imported
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size, faults = 40 * 2**20, []
def rounds():
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(size) for _ in range(4)]
        for block in blocks:
            ctypes.memset(block, 1, size)
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
thread = threading.Thread(target=rounds)
thread.start()
thread.join()
print(faults[-1])
"""


def _probe_faults(mode: str, extra_env: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    env.pop(MALLOC_SWITCH, None)
    env.update(extra_env)
    out = subprocess.run(
        [sys.executable, "-c", FAULT_PROBE, mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not _is_glibc(), reason="the malloc parameters are glibc's")
def test_entry_points_make_malloc_reuse_large_blocks():
    """After ``set_openmp_defaults()`` (what every entry point calls) a freed 40 MiB block's
    memory serves the next one without page faults.  glibc's defaults map every block above
    32 MiB afresh and unmap it at ``free``: each round would fault its 160 MiB in again (at
    least 80 faults even where every page could be a huge one)."""
    import ctypes
    import resource

    set_openmp_defaults()
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, faults = 40 * 2**20, []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(size) for _ in range(4)]
        for block in blocks:
            ctypes.memset(block, 1, size)  # touch every page
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    assert faults[-1] < 64, faults


@pytest.mark.integration
@pytest.mark.skipif(not _is_glibc(), reason="the malloc parameters are glibc's")
def test_large_blocks_are_reused_across_steps():
    """With the project's malloc parameters a freed 40 MiB block's memory serves the next
    one without new page faults, in a thread, both where the process applies them itself
    (the entry points) and where they come as variables at process start (what a Ray worker
    gets from ``openmp_env()``); with glibc's defaults (``CMPNN_DIST_MALLOC=0``) every round
    faults its memory in again."""
    default = _probe_faults("call", {MALLOC_SWITCH: "0"})
    assert default > 1000  # the probe sees the faults the setting removes
    assert _probe_faults("call", {}) < default / 20
    assert _probe_faults("env", {**MALLOC_DEFAULTS}) < default / 20


TORCH_IMPORT_PROBE = """
import os, sys
seen = []
class Probe:  # records OMP_WAIT_POLICY at the moment torch is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("OMP_WAIT_POLICY"))
sys.meta_path.insert(0, Probe())
import cmpnn_dist.train  # noqa: E402
import torch  # noqa: E402, F401  (if the module did not import it already)
print(seen[0])
"""


@pytest.mark.integration
def test_train_cli_sets_openmp_defaults_before_torch():
    """``python -m cmpnn_dist.train`` puts OMP_WAIT_POLICY in place before torch is imported."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", TORCH_IMPORT_PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "PASSIVE"


HUGE_PAGE_PROBE = """
import cmpnn_dist.train  # noqa: F401  (sets the defaults, as `python -m cmpnn_dist.train`)
import torch
x = torch.empty(64 << 18)  # 64 MiB of float32
x.fill_(1.0)
ptr, kb, inside = x.data_ptr(), None, False
for line in open("/proc/self/smaps"):
    head = line.split()[0]
    if "-" in head and ":" not in head:  # a mapping's first line: start-end perms ...
        start, end = (int(a, 16) for a in head.split("-"))
        inside = start <= ptr < end
    elif inside and line.startswith("AnonHugePages:"):
        kb = int(line.split()[1])
print(kb)
"""


@pytest.mark.integration
def test_train_cli_backs_large_tensors_with_huge_pages():
    """The train entry point turns on torch's huge-page allocation (fresh 4 KiB pages cost a
    fault each: a third of a PNA forward); a value the user set is kept."""
    mode_file = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode_file.exists() or "[never]" in mode_file.read_text():
        pytest.skip("transparent huge pages are off on this machine")

    def huge_kb(**extra: str) -> int:
        env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
        out = subprocess.run(
            [sys.executable, "-c", HUGE_PAGE_PROBE],
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.strip())

    assert huge_kb() >= 32 << 10  # at least half of the 64 MiB in 2 MiB pages
    if "[madvise]" in mode_file.read_text():  # only torch's madvise asks for them
        assert huge_kb(THP_MEM_ALLOC_ENABLE="0") == 0


def test_ray_workers_get_the_openmp_settings(monkeypatch):
    """Ray starts workers with these variables, so they hold before the worker imports torch."""
    pytest.importorskip("ray")
    from cmpnn_dist.distributed.driver import _worker_env

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _worker_env()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _worker_env()["OMP_WAIT_POLICY"] == "ACTIVE"
