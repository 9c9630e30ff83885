"""device: one call on a lent card (H100 / H200), prepared to fit its few minutes.

A device call is a plan of budgeted steps (:mod:`benchmarks.device.call`): each step a
benchmark of another suite with its own time cap, the whole call ending within ``--budget``
seconds, the results so far packed into ``--out`` after every step, so that a step cut short
still leaves the earlier ones.  The device tool runs, from the repository root::

    python -m benchmarks.device.call --plan session --budget 500 --out $OUT

The figures it brought back: ``results/device/`` (the call's summary and logs) and each
benchmark's own file in its suite's folder.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("call", "the session plan: tests, layer, pruned, e2e, profile, precision, wikikg2",
           ("--plan", "session", "--budget", "500", "--out", "OUT"), needs=("cuda",),
           name="session"),
    Target("call", "the fused kernels' check: tests, autotuned layer, profile, training step",
           ("--plan", "check", "--budget", "600", "--out", "OUT"), needs=("cuda",), name="check"),
    Target("call", "pruned propagation on the card: tests, profile, speed beside dense",
           ("--plan", "pruned", "--budget", "300", "--out", "OUT"), needs=("cuda",),
           name="pruned"),
    Target("call", "the inductive sweeps' unfinished cells, all at once on the card",
           ("--plan", "cells", "--budget", "540", "--out", "OUT"), needs=("cuda",), name="cells"),
    Target("call", "the session plan's commands, printed, not run (any machine)",
           ("--plan", "session", "--print"), ("--plan", "session", "--print"), name="print"),
]  # fmt: skip
