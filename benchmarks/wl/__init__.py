"""wl: expressivity: the relational WL tests' time, and which model fits which logic formula.

The figures: ``results/wl/``.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("wl_logic", "logic-planted tasks: which model family fits which formula", (),
           ("--steps", "20", "--seeds", "0", "--out", "{tmp}/wl_logic")),
    Target("wl_time", "the relational WL tests' time on the GraIL v1 graphs", (),
           needs=("shared-data",)),
]  # fmt: skip
