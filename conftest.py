"""Shared pytest configuration: markers, data paths, small fixtures."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import require_shared_data

# Without CUDA the Triton kernels run in Triton's interpreter; the flag must be set before
# any module imports triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")
    parser.addoption(
        "--integration",
        action="store_true",
        default=False,
        help="run tests marked integration (CLI runs, Ray, Serve, the browser, kill tests)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="slow test: pass --runslow to run it")
    skip_integration = pytest.mark.skip(
        reason="integration test: pass --integration to run it (docs/testing.md)"
    )
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("slow") and not config.getoption("--runslow"):
            item.add_marker(skip_slow)
        if item.get_closest_marker("integration") and not config.getoption("--integration"):
            item.add_marker(skip_integration)
        if item.get_closest_marker("gpu") and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only reference graphs in ../shared/data (see :func:`require_shared_data`)."""
    return require_shared_data()


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> dict:
    """A tiny real run (tests/helpers/real_run.py) under a local storage root: its summary, with
    ``root`` (the storage root), ``run_dir`` (the run folder, a local path) and ``files`` (the
    files the run left in it)."""
    from tests.helpers.real_run import run_files, train_tiny

    root = tmp_path_factory.mktemp("real_run_local")
    out = dict(train_tiny(str(root)))
    out.update(root=str(root), files=run_files(out["run_dir"]))
    return out


@pytest.fixture(scope="session")
def real_run_uri(tmp_path_factory) -> dict:
    """The same tiny run under a ``file://`` storage root: its summary, with ``root`` (the
    URI), ``base`` (the local folder behind it) and ``cwd`` (where it ran: nothing may land
    there)."""
    from tests.helpers.real_run import run_files, train_tiny

    base = tmp_path_factory.mktemp("real_run_uri")
    cwd = tmp_path_factory.mktemp("real_run_uri_cwd")
    old = os.getcwd()
    os.chdir(cwd)
    try:
        out = dict(train_tiny(f"file://{base}"))
    finally:
        os.chdir(old)
    files = run_files(base / "runs" / "tiny")
    out.update(root=f"file://{base}", base=str(base), cwd=str(cwd), files=files)
    return out


_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _restore_signal_handlers():
    """Put back the process's signal handlers after every test: an in-process ``ray.init``
    installs its own SIGTERM / SIGINT handlers, which would otherwise outlive the test and
    turn a signal meant for a later test's child into the end of pytest itself."""
    saved = {s: signal.getsignal(s) for s in _HANDLED}
    yield
    for sig, handler in saved.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


# ---- the fast tier's rule: no new processes -------------------------------------------------
# ``python -m pytest`` (the fast tier) runs unit tests only: a test that starts a Python
# interpreter, a Ray node, a browser or any other program (``git``, ``uname`` aside) belongs to the
# integration tier (``@pytest.mark.integration``) or the slow one.  The guard below makes that
# rule fail loudly instead of slowly: in the fast tier such a spawn raises, naming the test.
# ``CMPNN_TIER_AUDIT=FILE`` records the offending tests in FILE (one node id a line) and lets
# them run, which is how a suite is sorted into tiers.
_CHEAP_PROGRAMS = {"git", "uname"}  # cheap look-ups of the checkout and the machine


class TierViolation(RuntimeError):
    """A test of the fast tier started a process."""


def _spawn_guard(nodeid: str, audit: str | None):
    def check(what: str) -> None:
        if audit:
            with open(audit, "a") as fh:
                fh.write(f"{nodeid}\t{what}\n")
            return
        raise TierViolation(
            f"{nodeid} started {what}: a test of the fast tier starts no process; mark it "
            "@pytest.mark.integration (docs/testing.md)"
        )

    return check


@contextlib.contextmanager
def _no_process_unless_marked(item: pytest.Item):
    """While ``item`` sets up, runs and tears down (its fixtures included, so a module fixture
    that trains through the CLI counts against the first test that asks for it)."""
    if {m.name for m in item.iter_markers()} & {"integration", "slow", "gpu"}:
        yield
        return
    import multiprocessing.util
    import subprocess

    check = _spawn_guard(item.nodeid, os.environ.get("CMPNN_TIER_AUDIT"))
    real_init, real_spawn, real_fork = (
        subprocess.Popen.__init__,
        multiprocessing.util.spawnv_passfds,
        os.fork,
    )

    def popen_init(self, args, *a, **kw):
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        program = Path(os.fsdecode(argv[0]).split()[0]).name if argv else "?"
        if program not in _CHEAP_PROGRAMS:
            check(f"the program {program!r}")
        real_init(self, args, *a, **kw)

    def spawnv_passfds(path, args, passfds):
        check("a multiprocessing child")
        return real_spawn(path, args, passfds)

    def fork():
        check("os.fork()")
        return real_fork()

    subprocess.Popen.__init__ = popen_init
    multiprocessing.util.spawnv_passfds = spawnv_passfds
    os.fork = fork
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real_init
        multiprocessing.util.spawnv_passfds = real_spawn
        os.fork = real_fork


def pytest_collection_finish(session: pytest.Session) -> None:
    """Find (or build) the compiled CPU kernel before the first test runs: its cache key asks
    ``c++ --version``, a process the rule above refuses inside a fast-tier test, and a part of
    the suite run alone need not import the kernel's module while collecting, as the whole
    suite does.  A machine without the kernel runs the pure-torch path, as the tests expect.
    Matplotlib's font list likewise: a fresh machine builds it on first use, asking
    ``fc-list``, so whichever test draws first would trip the rule."""
    if not session.items:
        return
    try:
        import cmpnn_dist.ops.cpu  # noqa: F401  (loads the library)
    except Exception:  # noqa: BLE001  (KernelUnavailable, or torch absent: the tests say so)
        pass
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401  (builds the font cache once)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    with _no_process_unless_marked(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _no_process_unless_marked(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    with _no_process_unless_marked(item):
        yield
