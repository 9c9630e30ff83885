"""cluster: Ray Train across workers, and a run under chaos against a straight one.

The figures: ``results/cluster/``.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("scaling", "Ray Train queries/s with 1..N workers, checkpoint size and timings",
           ("--workers", "1", "2")),
    Target("chaos", "a Ray run under random SIGKILLs and a corrupted checkpoint, bit-identical",
           ("--steps", "6000", "--every-steps", "25", "--interval", "45", "--jitter", "0.33",
            "--corrupt-once", "--set", "train.epochs=20")),
]  # fmt: skip
