"""serving: answering queries: the one-query API, the batch job, the HTTP server under load.

The figures: ``results/serving/``.
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("batch_scoring", "the batch-scoring Ray job against the one-query API",
           ("--rounds", "3")),
    Target("predict_speed", "batch prediction against the evaluation's ranking; one explanation",
           (), ("--reps", "1", "--out", "{tmp}")),
    Target("serve_load", "the HTTP server under load: requests/s and p50 / p99 latency",
           ("--rounds", "3", "--seconds", "10")),
]  # fmt: skip
