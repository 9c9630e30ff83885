"""The driver's signal handling around Ray Train's ``fit`` (``distributed/stop.py``), with real
signals sent to this process and plain callables standing in for the blocking ``fit`` (these
tests are about the thread and the handlers; ``test_distributed_interrupt.py`` runs it with
Ray).  Also the ``slow`` fault the Ray tests pace their runs with, and a real tiny run stopped
by a stop source outside its process (what a sweep's cell gets from its driver)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from torch import nn

from cmpnn_dist.distributed import faults
from cmpnn_dist.distributed.stop import StopFlag, WorkersDidNotStop, fit_until_stopped


def _signal_soon(signum: int, delay_s: float = 0.3) -> threading.Timer:
    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def test_no_signal_returns_fits_result_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    assert fit_until_stopped(lambda: 42, lambda s: None, grace_s=5) == (42, None)
    assert signal.getsignal(signal.SIGTERM) is before


def test_fits_error_is_raised_in_the_caller():
    def fit():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fit_until_stopped(fit, lambda s: None, grace_s=5)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_is_passed_on_once_and_fit_is_awaited(signum):
    requested: list[int] = []
    stopped = threading.Event()

    def fit():  # a run whose workers stop once asked
        assert stopped.wait(30), "the stop request never came"
        return "checkpointed"

    def request_stop(sig: int) -> None:
        requested.append(sig)
        stopped.set()

    timer = _signal_soon(signum)
    result = fit_until_stopped(fit, request_stop, grace_s=30)
    timer.join()
    assert result == ("checkpointed", signum)
    assert requested == [signum]


def test_workers_that_do_not_stop_are_given_up_after_the_grace_time():
    release = threading.Event()
    timer = _signal_soon(signal.SIGTERM)
    start = time.monotonic()
    with pytest.raises(WorkersDidNotStop) as info:
        fit_until_stopped(lambda: release.wait(60), lambda s: None, grace_s=1.0)
    release.set()
    timer.join()
    assert 1.0 <= time.monotonic() - start < 10
    exc = info.value
    assert exc.exit_status == 143
    exc.step, exc.checkpoint, exc.resume = 6, "/r/checkpoints/step_00000006", "python -m x"
    assert str(exc) == (
        "interrupted by SIGTERM: the workers did not stop within 1 s and were stopped; "
        "newest checkpoint /r/checkpoints/step_00000006 (step 6); resume with: python -m x"
    )


def test_a_second_ctrl_c_stops_at_once():
    release = threading.Event()
    first, second = _signal_soon(signal.SIGINT, 0.3), _signal_soon(signal.SIGINT, 0.9)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        fit_until_stopped(lambda: release.wait(60), lambda s: None, grace_s=60)
    release.set()
    first.join()
    second.join()
    assert time.monotonic() - start < 10


def test_the_stop_flag_keeps_the_first_request():
    """The flag's class as its Ray actor runs it: a Ctrl-C after a SIGTERM (or a second
    driver's request) does not change the signal the workers stop with."""
    flag = StopFlag()
    assert flag.stop_signal() is None
    flag.request_stop(signal.SIGTERM)
    flag.request_stop(signal.SIGINT)
    assert flag.stop_signal() == signal.SIGTERM


def test_slow_fault_sleeps_in_every_training_forward_from_its_step(monkeypatch):
    monkeypatch.setenv(faults.ENV_FAULT, "slow@rank0:step3")
    monkeypatch.setenv(faults.ENV_SLOW_S, "0.15")
    model = nn.Linear(1, 1)
    faults.install(model, rank=0)
    x = torch.zeros(1, 1)
    took = []
    for _ in range(4):
        start = time.perf_counter()
        model(x)
        took.append(time.perf_counter() - start)
    assert max(took[:2]) < 0.1 and min(took[2:]) >= 0.15, took
    assert faults.propagated_env()[faults.ENV_SLOW_S] == "0.15"


def test_a_stop_source_outside_the_process_stops_a_run_at_the_step_it_answers(tmp_path):
    """A sweep's cell trains in a Ray Tune trial, where no signal can be caught: its driver's
    request arrives through ``stop_source``, polled once after each step.  A real tiny run
    whose source answers SIGTERM from its 7th poll on stops at step 7 with that step
    checkpointed (the same ending as a signal: one exception, exit status 143)."""
    from cmpnn_dist.cli.train import train_cell
    from cmpnn_dist.training.interrupt import TrainingInterrupted
    from tests.helpers.real_run import TINY

    polls: list[int] = []

    def source() -> int | None:
        polls.append(len(polls) + 1)
        return signal.SIGTERM if len(polls) >= 7 else None

    over = [o for o in TINY if not o.startswith("checkpoint.every_steps=")]
    over += ["checkpoint.every_steps=1000", f"storage_root={tmp_path}", "run_name=cell"]
    with pytest.raises(TrainingInterrupted) as info:
        train_cell("default", over, stop_source=source)
    exc = info.value
    run = tmp_path / "runs" / "cell"
    assert (exc.step, exc.exit_status, len(polls)) == (7, 143, 7)
    assert exc.checkpoint == str(run / "checkpoints" / "step_00000007")
    assert [p.name for p in (run / "checkpoints").glob("step_*")] == ["step_00000007"]
    assert not (run / "results.json").exists()
