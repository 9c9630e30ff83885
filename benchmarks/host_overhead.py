"""Host time the fused op's Python wrapper spends per call, measured on any machine.

On a GPU the fused forward's kernel cannot start before the host has run ``propagate`` up to
the Triton launch, so that prefix adds to every host-timed call (issue 5's remaining gap).
This measures the wrapper alone: the Triton launches are intercepted and not run (the
interpreter would dominate on CPU), every torch op around them runs for real, on tensors small
enough (300 nodes, 3,000 facts, B = 2, d = 4) that what is timed is dispatch and Python, not
arithmetic -- on a GPU those ops are asynchronous launches.  Reported as medians in
microseconds and in units of one small torch op on the same machine (the ratio is what carries
over to another host):

* ``fwd_prefix``: ``propagate`` entry -> the forward kernel's launch;
* ``fwd``: the whole forward call; ``fwd_bwd``: forward, a sum loss and ``autograd.grad``.

    python benchmarks/host_overhead.py      # writes benchmarks/results/host_overhead_cpu.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from message_passing import save_results  # noqa: E402


def median_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    from cmpnn_dist.graph import graph_from_triples
    from cmpnn_dist.ops import triton_mp

    rng = np.random.default_rng(0)
    n, r, m = 300, 8, 3000
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, r, m), rng.integers(0, n, m)], 1)
    graph = graph_from_triples(n, r, facts)
    x = torch.randn(n, 2, 4, requires_grad=True)
    rel = torch.randn(graph.num_relations, 4, requires_grad=True)
    marks: list[float] = []
    launch = triton_mp._launch
    triton_mp._launch = lambda *a, **k: marks.append(time.perf_counter())  # not run: timed only
    try:

        def fwd() -> dict:
            return triton_mp.propagate(graph, x, rel, message="mul", aggregators=("sum",))

        def fwd_bwd() -> None:
            torch.autograd.grad(fwd()["sum"].sum(), [x, rel])

        fwd_bwd()  # builds the cached edge orders
        small = torch.zeros(8)
        prefix, whole, ops = [], [], []
        for _ in range(args.reps):  # interleaved, so machine drift hits all three alike
            marks.clear()
            t0 = time.perf_counter()
            fwd()
            t1 = time.perf_counter()
            small.add_(1.0)
            t2 = time.perf_counter()
            prefix.append((marks[0] - t0) * 1e6)
            whole.append((t1 - t0) * 1e6)
            ops.append((t2 - t1) * 1e6)
        res = {"fwd_prefix": statistics.median(prefix), "fwd": statistics.median(whole)}
        res["fwd_bwd"] = median_us(fwd_bwd, args.reps // 3)
    finally:
        triton_mp._launch = launch
    op = statistics.median(ops)
    result = {
        "benchmark": "host_overhead",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"python {platform.python_version()}",
        "command": "python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        "note": "fused wrapper's host time with Triton launches intercepted (not run); "
        f"{n} nodes, {graph.num_edges} edges, B 2, d 4, MSG 1 sum; medians",
        "small_torch_op_us": op,
        "us": res,
        "in_small_torch_ops": {k: v / op for k, v in res.items()},
    }
    for k, v in res.items():
        print(f"{k}: {v:.1f} us = {v / op:.1f} small torch ops ({op:.2f} us each)")
    save_results(Path(args.out), "host_overhead_cpu", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
