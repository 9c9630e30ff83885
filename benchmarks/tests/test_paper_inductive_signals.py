"""``benchmarks/accuracy/paper_inductive.py run`` passes a Ctrl-C or a ``kill`` on to the running
sweep, once each (``run_passing_signals``), so the sweep checkpoints its cells and ends the piece
with its own exit status, instead of being killed with the runner.  Checked on real processes:
a child that records the signals it receives stands in for the sweep (the sweep's own answer
to them is ``tests/integration/test_sweep.py``'s Ctrl-C test)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.paths import REPO_ROOT

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests


CHILD = textwrap.dedent(
    """
    import signal, sys, time
    got = []
    def note(signum, frame):
        got.append(signum)
        print("got", signal.Signals(signum).name, flush=True)
    signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    print("ready", flush=True)
    deadline = time.time() + 60
    while len(got) < 2 and time.time() < deadline:
        time.sleep(0.02)
    sys.exit(128 + got[0])
    """
)

RUNNER = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(REPO_ROOT)!r})
    from benchmarks.accuracy.paper_inductive import run_passing_signals
    sys.exit(run_passing_signals([sys.executable, "-c", {CHILD!r}]))
    """
)


def test_ctrl_c_and_kill_reach_the_sweep_once_each_and_its_status_is_returned():
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER], start_new_session=True, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        lines = [runner.stdout.readline().strip()]
        assert lines == ["ready"], runner.stderr.read()
        os.killpg(runner.pid, signal.SIGINT)  # a terminal's Ctrl-C: the runner's whole group
        lines.append(runner.stdout.readline().strip())
        os.kill(runner.pid, signal.SIGTERM)  # `kill` of the runner alone
        out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
    lines += out.splitlines()
    # once each: a child in the runner's group would get the Ctrl-C twice (and exit early)
    assert lines == ["ready", "got SIGINT", "got SIGTERM"], err
    assert runner.returncode == 130, err  # the sweep's own status, not the runner's
