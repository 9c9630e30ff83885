"""house: how the code reads: lines per package, the longest functions, the walks a reader
takes from an entry point to the model, and the test suite's own measures (CI's time, the
mutation check).

The figures: ``results/house/``.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("house", "lines per package, the longest functions, the entry points", (), ()),
    Target("walks", "files, imports and hops from predict's checkpoint to the model's forward"),
]  # fmt: skip
