"""Build, cache and load the compiled CPU kernel (``cpu_kernel.cpp``: message passing,
``cpu_select.cpp``: pruned propagation's selection) on first use.

The kernel is compiled against the torch that is *installed* (never in pip's isolated build
environment, the torch-scatter trap), the first time a process asks for it: one compiler call
(``$CXX`` or ``c++``; ~15 s), no ninja, no Python headers, no pybind.  The shared library
registers ``torch.ops.cmpnn_cpu.forward`` / ``backward`` / ``select_senders`` /
``select_subgraph``.

Cache (``$CMPNN_DIST_CACHE`` or ``$XDG_CACHE_HOME/cmpnn_dist``, default ``~/.cache/cmpnn_dist``)::

    cpu_kernel/<key>/cmpnn_cpu.so       key = sha256(source, torch version and git hash, Python
                                        ABI, machine, compiler --version, flags, CPU flags)

A stale cache cannot be picked up: anything that changes the binary changes the key, so a new
torch, a new source or another CPU builds into a new folder.  A broken cache cannot be either:
the library is compiled under a temporary name and renamed into place only after the compiler
succeeded (concurrent builders each rename a complete file; there is no lock file to leave
behind), and every load is followed by a self-test against plain torch on a tiny graph.  Any
failure (no compiler, compile error, load error, self-test mismatch) is remembered for the
process and :func:`load` raises :class:`KernelUnavailable`; the dispatcher then runs the
pure-torch path.  Either way one line on stderr says which path runs.  ``CMPNN_DIST_CPU_KERNEL=0``
turns the kernel off.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

SOURCES = tuple(Path(__file__).with_name(f) for f in ("cpu_kernel.cpp", "cpu_select.cpp"))
LIBRARY = "cmpnn_cpu.so"
FLAGS = ("-O3", "-march=native", "-std=c++20", "-fPIC", "-shared", "-fopenmp", "-w")
ENV_SWITCH = "CMPNN_DIST_CPU_KERNEL"


class KernelUnavailable(RuntimeError):
    """The compiled CPU kernel cannot be used here (the message says why)."""


_state: dict[str, object] = {}


def cache_root() -> Path:
    """Folder of the on-disk cache (see the module docstring)."""
    if os.environ.get("CMPNN_DIST_CACHE"):
        return Path(os.environ["CMPNN_DIST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cmpnn_dist"


def _compiler() -> str:
    return os.environ.get("CXX") or "c++"


def _cpu_flags() -> str:
    """The CPU's feature flags (``-march=native`` depends on them)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("flags", "model name", "Features"))]
    return "\n".join(sorted(set(lines)))


def _command(output: Path) -> list[str]:
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [_compiler(), *FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-I{p}" for p in include_paths()]
    cmd += [*map(str, SOURCES), "-o", str(output)]
    for lib in library_paths():
        cmd += [f"-L{lib}", f"-Wl,-rpath,{lib}"]
    return [*cmd, "-lc10", "-ltorch_cpu"]


def cache_key() -> str:
    """Hash of everything the compiled library depends on."""
    try:
        version = subprocess.run(
            [_compiler(), "--version"], capture_output=True, text=True, timeout=60
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"no C++ compiler ({_compiler()}: {exc})") from exc
    parts = {
        "source": [hashlib.sha256(f.read_bytes()).hexdigest() for f in SOURCES],
        "torch": [torch.__version__, torch.version.git_version],
        "python": sys.implementation.cache_tag,
        "machine": platform.machine(),
        "compiler": [_compiler(), version],
        "flags": FLAGS,
        "cpu": hashlib.sha256(_cpu_flags().encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def build(folder: Path) -> float:
    """Compile into ``folder/cmpnn_cpu.so`` (temporary name, then rename); returns seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{LIBRARY}.tmp{os.getpid()}"
    log = folder / "build.log"
    start = time.perf_counter()
    cmd = _command(tmp)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelUnavailable(f"compiler did not run ({exc})") from exc
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        log_tmp = folder / f"build.log.tmp{os.getpid()}"
        log_tmp.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        os.replace(log_tmp, log)
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln] or ["(no message)"]
        raise KernelUnavailable(f"compile failed: {errors[0].strip()} (full log: {log})")
    os.replace(tmp, folder / LIBRARY)
    return time.perf_counter() - start


def self_test(check: Callable[[], str]) -> None:
    """Run ``check`` (the kernel module's forward and backward on a 3-node graph against plain
    torch: an error text, or "" when they agree) on the freshly loaded library."""
    try:  # the caller may be under no_grad / inference_mode (an evaluation's first forward)
        with torch.inference_mode(False), torch.enable_grad():
            error = check()
    except Exception as exc:  # noqa: BLE001  (any failure means: do not use this library)
        raise KernelUnavailable(f"self-test raised {exc!r}") from exc
    if error:
        raise KernelUnavailable(f"self-test failed: {error}")


def _load_uncached(check: Callable[[], str]) -> str:
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        raise KernelUnavailable(f"turned off by {ENV_SWITCH}=0")
    if shutil.which(_compiler()) is None:
        raise KernelUnavailable(f"no C++ compiler ({_compiler()} not found; set CXX)")
    folder = cache_root() / "cpu_kernel" / cache_key()
    path = folder / LIBRARY
    how = f"cached at {path}"
    if not path.exists():
        seconds = build(folder)
        how = f"compiled in {seconds:.0f} s, cached at {path}"
    try:
        torch.ops.load_library(str(path))
    except Exception as first:  # noqa: BLE001  (a file that does not load is rebuilt once)
        if "compiled" in how:
            raise KernelUnavailable(f"cannot load {path} ({first})") from first
        seconds = build(folder)
        how = f"rebuilt in {seconds:.0f} s (the cached file did not load), cached at {path}"
        try:
            torch.ops.load_library(str(path))
        except Exception as exc:  # noqa: BLE001
            raise KernelUnavailable(f"cannot load {path} ({exc})") from exc
    self_test(check)
    return how


def load(check: Callable[[], str]) -> None:
    """Make ``torch.ops.cmpnn_cpu`` available (build on first use, then ``check`` it: the caller
    passes its self-check, so this module imports no kernel code); raises
    :class:`KernelUnavailable` (the same reason every time in this process) when it cannot."""
    if "error" in _state:
        raise KernelUnavailable(str(_state["error"]))
    if "ok" in _state or "loading" in _state:  # loading: the self-test's own import
        return
    _state["loading"] = True
    try:
        how = _load_uncached(check)
    except KernelUnavailable as exc:
        _state["error"] = str(exc)
        print(
            f"[cmpnn_dist] CPU message passing: pure-torch path (compiled kernel unavailable: "
            f"{exc})",
            file=sys.stderr,
            flush=True,
        )
        raise
    finally:
        _state.pop("loading", None)
    _state["ok"] = how
    print(f"[cmpnn_dist] CPU message passing: compiled kernel ({how})", file=sys.stderr, flush=True)


def status() -> str:
    """``compiled (...)`` or ``unavailable (reason)`` after :func:`load` ran; ``not loaded``."""
    if "ok" in _state:
        return f"compiled ({_state['ok']})"
    if "error" in _state:
        return f"unavailable ({_state['error']})"
    return "not loaded"


__all__ = ["KernelUnavailable", "build", "cache_key", "cache_root", "load", "status"]
