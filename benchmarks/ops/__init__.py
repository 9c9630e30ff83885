"""ops: one message-passing layer, every implementation, against its oracle and its memory floor.

The figures: ``results/ops/`` (the CPU kernel against the reference path, the fused Triton
kernels on a card, the generic message path, the query-edge mask, the fused op's host time).
"""

from benchmarks.harness.suites import Target

TARGETS = [
    Target("message_passing", "one layer at biokg scale, every impl, outputs and gradients checked",
           ("--device", "cuda"), ("--small", "--device", "cpu", "--reps", "1", "--out", "{tmp}"),
           needs=("cuda",)),
    Target("cpu_kernel", "the compiled CPU kernel against the reference path and the memory floor",
           ("--scales", "tenth,full", "--threads", "1,2")),
    Target("message_functions", "the generic message path against the hand-written kernels",
           ("--reps", "5", "--threads", "1"),
           ("--reps", "1", "--nodes", "500", "--facts", "2000", "--out", "{tmp}")),
    Target("edge_mask", "the query-edge mask against a torch.isin scan"),
    Target("host_overhead", "the fused op's host time per call (Triton launches intercepted)"),
    Target("profile_fused", "one fused layer on a card: host wall, GPU span, graph replay",
           needs=("cuda",)),
    Target("gpu_check_reference", "naive against reference values and gradients on a card",
           needs=("cuda",)),
]  # fmt: skip
