"""studies: one-off investigations, frozen with their reports in ``results/studies/``.

Each answered one question once (which ops differ between thread counts; the seed
determinism's cost; where pruned propagation loses accuracy and what a wider test budget or the
relation prior recovers; the first reproduction of the paper's tables; naive against reference
propagation).  They still run (``python -m benchmarks.studies.<name> --help``), but no suite
runs them and their figures are not kept current.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("thread_invariance", "which ops of a step differ between 1 and 2 threads"),
    Target("seed_determinism", "the thread-invariant step's cost against a checkout before it"),
    Target(
        "pruned_gap",
        "Hits@10_50 within and beyond the heads' 6-hop horizon",
        ("--dataset", "DATASET", "--runs", "RUN"),
    ),
    Target(
        "pruned_unvisited",
        "which test answers a pruned run visits",
        ("--runs", "RUN", "--storage", "STORE"),
    ),
    Target("pruned_test_budget", "pruned-trained checkpoints at wider test budgets"),
    Target("pruned_biokg_rules", "pruned beside dense on a rule-planted biokg-shaped graph"),
    Target("reproduce_tables", "the INIT / readout / transductive tables at one epoch"),
    Target("bench_propagate", "naive against reference propagate on fb237_v1"),
]
