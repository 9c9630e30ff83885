"""TensorBoard after a resume holds each (tag, step) once, on a ``file://`` storage root too.

The tiny real run (tests/helpers/real_run.py) under a ``file://`` root is SIGKILLed in a child
process during step 15 (its step-10 checkpoint and logs uploaded), then resumed in this
process.  Every event file left under ``<run>/tensorboard`` is read with TensorBoard's own
event reader (``EventFileLoader``, file by file: no de-duplication on read), and the
(tag, step) pairs are counted: each appears once, and the values equal those of the session's
straight run on a ``file://`` root (``real_run_uri``), wall-clock tags aside.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.real_run import interrupt_tiny, train_tiny

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests

TIME_TAGS = {"train/time_s"}  # wall-clock seconds: differ between any two runs


def _scalars(folder: Path) -> tuple[Counter, dict[tuple[str, int], float]]:
    """``(count of every (tag, step) over all event files, its value)`` of a TensorBoard dir."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    counts: Counter = Counter()
    values: dict[tuple[str, int], float] = {}
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert files, f"no event file under {folder}"
    for path in files:
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                if v.HasField("tensor"):
                    value = float(tensor_util.make_ndarray(v.tensor).item())
                else:
                    value = float(v.simple_value)
                counts[(v.tag, event.step)] += 1
                values[(v.tag, event.step)] = value
    return counts, values


def test_a_file_uri_root_resumed_after_sigkill_has_each_tag_and_step_once(real_run_uri, tmp_path):
    base = tmp_path / "store"
    root = f"file://{base}"
    proc = interrupt_tiny(tmp_path, root, signal.SIGKILL, at=15)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    tb = base / "runs" / "tiny" / "tensorboard"
    killed, _ = _scalars(tb)
    assert max(step for _, step in killed) == 10  # the step-10 checkpoint's upload, no later
    resumed = train_tiny(root)
    assert resumed["resumed_from_step"] == 10
    counts, values = _scalars(tb)
    twice = sorted(key for key, n in counts.items() if n != 1)
    assert twice == [], f"(tag, step) pairs not written exactly once: {twice[:10]}"
    ref_counts, ref = _scalars(Path(real_run_uri["base"]) / "runs" / "tiny" / "tensorboard")
    assert set(counts) == set(ref_counts)
    assert max(step for _, step in counts) == 20
    for key, value in ref.items():
        if key[0] not in TIME_TAGS:
            assert values[key] == value, key
    assert resumed["test"] == real_run_uri["test"]
