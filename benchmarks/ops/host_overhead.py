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
* ``fwd``: the whole forward call; ``fwd_bwd``: forward, a sum loss and ``autograd.grad``;
* ``ops_fwd`` / ``ops_fwd_bwd``: the aten ops dispatched (each a launch on a GPU).

``--baseline REV`` also loads ``cmpnn_dist/ops/triton_mp.py`` as of git revision REV and
times it in the same loop, call for call interleaved with the current one (the kernels
module is today's: launches are intercepted, so only the wrapper differs).

    python -m benchmarks.ops.host_overhead [--baseline HEAD~1]   # -> results/host_overhead_cpu.json
"""

from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line
from benchmarks.harness.results import results_dir, save_results
from tests.helpers.host_sync import OpLog  # the tests' log of dispatched aten ops

HERE = Path(__file__).resolve().parent


def wrapper_at(rev: str) -> ModuleType:
    """``cmpnn_dist.ops.triton_mp`` as of git revision ``rev``, loaded under another name."""
    src = subprocess.run(
        ["git", "show", f"{rev}:cmpnn_dist/ops/triton_mp.py"],
        cwd=HERE.parents[1], check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "triton_mp_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("triton_mp_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--baseline", default=None, help="git revision to time side by side")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    from cmpnn_dist.graph import graph_from_triples
    from cmpnn_dist.ops import triton_mp

    rng = np.random.default_rng(0)
    n, r, m = 300, 8, 3000
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, r, m), rng.integers(0, n, m)], 1)
    graph = graph_from_triples(n, r, facts)
    x = torch.randn(n, 2, 4, requires_grad=True)
    rel = torch.randn(graph.num_relations, 4, requires_grad=True)
    wrappers = {"current": triton_mp}
    if args.baseline:
        wrappers[args.baseline] = wrapper_at(args.baseline)
    marks: list[float] = []
    saved = {name: mod._launch for name, mod in wrappers.items()}
    for mod in wrappers.values():  # not run: timed only
        mod._launch = lambda *a, **k: marks.append(time.perf_counter())
    try:

        def call(mod: ModuleType) -> dict:
            return mod.propagate(graph, x, rel, message="mul", aggregators=("sum",))

        fwd = {name: partial(call, mod) for name, mod in wrappers.items()}

        def fwd_bwd(name: str) -> None:
            torch.autograd.grad(fwd[name]()["sum"].sum(), [x, rel])

        res: dict[str, dict[str, float]] = {}
        for name in wrappers:
            fwd_bwd(name)  # builds the cached edge orders
            counts = []
            for fn in (fwd[name], lambda name=name: fwd_bwd(name)):
                with OpLog() as log:
                    fn()
                counts.append(len(log.ops))
            res[name] = {"ops_fwd": counts[0], "ops_fwd_bwd": counts[1]}
        small = torch.zeros(8)
        times: dict[tuple[str, str], list[float]] = {}
        ops = []
        for i in range(args.reps):  # interleaved, so machine drift hits everything alike
            for name in wrappers:
                marks.clear()
                t0 = time.perf_counter()
                fwd[name]()
                t1 = time.perf_counter()
                times.setdefault((name, "fwd_prefix"), []).append((marks[0] - t0) * 1e6)
                times.setdefault((name, "fwd"), []).append((t1 - t0) * 1e6)
                if i % 3 == 0:
                    t0 = time.perf_counter()
                    fwd_bwd(name)
                    times.setdefault((name, "fwd_bwd"), []).append((time.perf_counter() - t0) * 1e6)
            t0 = time.perf_counter()
            small.add_(1.0)
            ops.append((time.perf_counter() - t0) * 1e6)
    finally:
        for name, mod in wrappers.items():
            mod._launch = saved[name]
    op = statistics.median(ops)
    for (name, key), vals in times.items():
        res[name][key] = statistics.median(vals)
    result = {
        "benchmark": "host_overhead",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"python {platform.python_version()}",
        "command": command_line(__file__, argv or sys.argv[1:]),
        "note": "fused wrapper's host time with Triton launches intercepted (not run); "
        f"{n} nodes, {graph.num_edges} edges, B 2, d 4, MSG 2 sum; medians"
        + (f"; baseline = triton_mp.py at {args.baseline}, interleaved" if args.baseline else ""),
        "small_torch_op_us": op,
        "us": res["current"],
        "in_small_torch_ops": {k: res["current"][k] / op for k in ("fwd_prefix", "fwd", "fwd_bwd")},
    }
    if args.baseline:
        result["baseline"] = {"rev": args.baseline, "us": res[args.baseline]}
    for name, r_ in res.items():
        for key in ("fwd_prefix", "fwd", "fwd_bwd"):
            print(f"{name:>10} {key}: {r_[key]:.1f} us = {r_[key] / op:.1f} small torch ops")
        print(f"{name:>10} aten ops: forward {r_['ops_fwd']}, forward+backward {r_['ops_fwd_bwd']}")
    if args.baseline:
        base = res[args.baseline]
        print("current / baseline: " + ", ".join(
            f"{k} {res['current'][k] / base[k]:.2f}" for k in ("fwd_prefix", "fwd", "fwd_bwd")
        ))  # fmt: skip
    print(f"(one small torch op: {op:.2f} us)")
    save_results(Path(args.out), "host_overhead_cpu", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
