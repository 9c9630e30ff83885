"""Where the time of one fused message-passing layer goes (CUDA): kernels vs everything else.

For MSG 1 sum on the biokg-scale graph (B = 8, d = 32), float32 and bfloat16: the median
wall time of forward and forward+backward (as ``message_passing.py`` measures it), the GPU
span of the same call between two CUDA events, the same call replayed from a CUDA graph (no
Python or launch overhead), and the profiler's per-kernel device time.  The gap between the
wall time and the kernels' sum is what the op spends outside the Triton kernels.

The host side of that gap: ``host_ms``, how long the call takes to return (the GPU runs
behind it; the queue is drained before and after, outside the timing), the host time of each
Triton launch (``triton_tuning.launch``, autotuner + JIT dispatch + driver call) and, for scale,
of one small torch op on the same machine.

    python -m benchmarks.ops.profile_fused --out DIR      # writes DIR/profile_fused_<card>.json
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.graphs import load_graph
from benchmarks.harness.results import results_dir, save_results
from benchmarks.ops.message_passing import make_inputs

HERE = Path(__file__).resolve().parent


def wall_ms(fn, reps: int, wait: bool = True) -> float:
    """Median host ms of fn(), the device idle before each call; ``wait``: until the GPU has
    finished it (as message_passing.py times), else until the call returns (host time)."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if wait:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def event_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def launch_host_us(fn, reps: int) -> dict[str, float]:
    """Median host microseconds per Triton launch inside fn(), keyed by kernel name."""
    from cmpnn_dist.ops import triton_mp

    launch, spent = triton_mp._launch, {}

    def timed_launch(name: str, *args, **kwargs) -> None:
        t0 = time.perf_counter()
        launch(name, *args, **kwargs)
        spent.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)

    triton_mp._launch = timed_launch
    try:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    finally:
        triton_mp._launch = launch
    return {name: statistics.median(v) for name, v in spent.items()}


def torch_op_host_us(reps: int = 200) -> float:
    """Median host microseconds of one small elementwise CUDA op (the cost of any launch)."""
    t = torch.zeros(1024, device="cuda")
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        t.add_(1.0)
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def graph_ms(fn, reps: int) -> float:
    """Median ms of fn replayed from a CUDA graph (captured after warm-up)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return event_ms(g.replay, reps)


def kernel_table(fn, reps: int) -> list[dict]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        # device rows only; GPU user annotations (an op's range on the GPU timeline, named
        # like the op) would count their kernels twice
        if "CUDA" not in str(getattr(ev, "device_type", "")) or getattr(
            ev, "is_user_annotation", False
        ):
            continue
        dev_us = getattr(ev, "self_device_time_total", None)
        if dev_us is None:
            dev_us = getattr(ev, "self_cuda_time_total", 0)
        if dev_us > 0:
            rows.append({"name": ev.key[:80], "calls": ev.count // reps, "ms": dev_us / reps / 1e3})
    return sorted(rows, key=lambda r: -r["ms"])


def main() -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--graph-cache", default="/tmp/cmpnn_biokg_scale_csr.npz")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args()
    from cmpnn_dist.ops import triton_mp

    graph = load_graph(Path(args.graph_cache)).to("cuda")
    card = torch.cuda.get_device_name()
    result = {"device": card, "torch": torch.__version__, "cases": {}}
    result["triton_configs"] = os.environ.get("CMPNN_TRITON_CONFIGS", "default space")
    result["torch_op_host_us"] = torch_op_host_us()
    for dtype_name in ("float32", "bfloat16"):
        x, message, rel, leaves = make_inputs(
            "mul1", graph, 8, 32, getattr(torch, dtype_name), "cuda"
        )

        def fwd(x=x, rel=rel) -> dict:
            return triton_mp.propagate(graph, x, rel, message="mul", aggregators=("sum",))

        def fwd_bwd(leaves=leaves) -> None:
            torch.autograd.grad(fwd()["sum"].float().sum(), leaves)

        fwd_bwd()
        fwd_bwd()
        case = {}
        for name, fn in (("forward", fwd), ("fwd_bwd", fwd_bwd)):
            case[name] = {
                "wall_ms": wall_ms(fn, args.reps),
                "events_ms": event_ms(fn, args.reps),
                "host_ms": wall_ms(fn, args.reps, wait=False),
                "launch_host_us": launch_host_us(fn, args.reps),
                "kernels": kernel_table(fn, 5),
            }
            try:
                case[name]["cuda_graph_ms"] = graph_ms(fn, args.reps)
            except Exception as exc:  # noqa: BLE001 - record why capture failed
                case[name]["cuda_graph_ms"] = f"{type(exc).__name__}: {str(exc)[:150]}"
            k = case[name]
            ksum = sum(r["ms"] for r in k["kernels"])
            launches = ", ".join(f"{n} {us:.0f} us" for n, us in k["launch_host_us"].items())
            print(f"{dtype_name} {name}: wall {k['wall_ms']:.3f} ms, events {k['events_ms']:.3f}, "
                  f"cuda graph {k['cuda_graph_ms']}, kernels sum {ksum:.3f}, host (call "
                  f"returns) {k['host_ms']:.3f}; Triton launch host time: {launches}")  # fmt: skip
            for r in k["kernels"][:8]:
                print(f"    {r['ms']:.3f} ms  x{r['calls']}  {r['name']}")
        result["cases"][dtype_name] = case
    print(f"one small torch op: {result['torch_op_host_us']:.1f} us of host time")
    tag = card.replace("NVIDIA ", "").split()[0].lower()
    save_results(Path(args.out), f"profile_fused_{tag}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
