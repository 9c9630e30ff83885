"""Where a pruned (or dense) training step spends its time: torch.profiler tables, the phases
(forward / backward / optimizer) timed apart, and the host syncs counted (CUDA).

The graphs, batches and models are :mod:`pruned_speed`'s (same seeds).  Per config: ``--warmup``
untimed steps, then ``--steps`` steps timed by phase (synchronised on CUDA) and one more step
under ``torch.profiler``; on CUDA the steps also run under ``torch.cuda.set_sync_debug_mode``
so every host sync is counted with the line of this package that caused it.  From the profiled
step (CUDA) the launch and copy counts: kernel-launch API calls (``cudaLaunchKernel``,
``cuLaunchKernel[Ex]``, ...), kernels that ran on the device, ``cudaStreamSynchronize`` /
``cudaDeviceSynchronize`` calls (the latter include the 4 of this script's phase timing) and
device-to-host copies.  The same counts are taken for one evaluation forward (no grad,
``--eval-batch`` queries).

    python -m benchmarks.pruned.pruned_profile --graph biokg --device cuda --ratios dense 0.02
    python -m benchmarks.pruned.pruned_profile --graph small --ratios 0.1        # CPU smoke run

Writes ``<out>/pruned_profile_<device>.txt`` (tables) and ``.json`` (phases, syncs).
"""

from __future__ import annotations

import collections
import json
import re
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import git_commit
from benchmarks.harness.results import results_dir
from benchmarks.pruned.pruned_speed import Batches, build_graph, make_model
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.training.loss import self_adversarial_bce

HERE = Path(__file__).resolve().parent


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def phases(model, opt, graph, q, neg, mask, dev: str) -> dict:
    """Wall seconds of forward (+ loss), backward and optimizer of one training step."""
    out = {}
    sync(dev)
    t = time.perf_counter()
    logits = model(graph, q[:, 0], q[:, 1], mask)
    loss = self_adversarial_bce(logits.gather(1, q[:, 2:3]).squeeze(1), logits.gather(1, neg), 0.5)
    sync(dev)
    out["forward"] = time.perf_counter() - t
    t = time.perf_counter()
    loss.backward()
    sync(dev)
    out["backward"] = time.perf_counter() - t
    t = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync(dev)
    out["optimizer"] = time.perf_counter() - t
    return out


def count_syncs(fn, args: tuple, dev: str) -> collections.Counter:
    """Host syncs of ``fn(*args)`` by the innermost cmpnn_dist frame that caused them (CUDA)."""
    found: collections.Counter = collections.Counter()
    if dev != "cuda":
        fn(*args)
        return found

    def hook(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return
        frames = [f for f in traceback.extract_stack() if "cmpnn_dist" in f.filename]
        where = frames[-1] if frames else None
        found[
            f"{Path(where.filename).name}:{where.lineno}"
            if where
            else f"{Path(filename).name}:{lineno}"
        ] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = hook
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn(*args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return found


LAUNCH_API = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
)
SYNC_API = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def launch_counts(prof) -> dict:
    """Launch, sync and copy counts of a profiled region (CUDA; {} when nothing was seen)."""
    counts: collections.Counter = collections.Counter()
    for e in prof.key_averages():
        name = e.key
        if name in LAUNCH_API:
            counts["launch_api_calls"] += e.count
            counts[name] += e.count
        elif name in SYNC_API or name.startswith("cudaMemcpy"):
            counts[name] += e.count
        elif name.startswith("Memcpy DtoH"):
            counts["memcpy_dtoh"] += e.count
        elif name.startswith("Memcpy HtoD"):
            counts["memcpy_htod"] += e.count
        elif name.startswith(("Memset", "Memcpy")):
            counts["memset_or_other_copy"] += e.count
        elif str(getattr(e, "device_type", "")).endswith("CUDA"):
            counts["device_kernels"] += e.count
        elif re.match(r"cu(da)?[A-Z]", name):  # any other runtime / driver API call
            counts[name] += e.count
    return dict(counts)


def count_line(label: str, syncs: int, c: dict) -> str:
    return (
        f"{label}: {c.get('launch_api_calls', 0)} kernel launches (API calls), "
        f"{c.get('device_kernels', 0)} kernels on the device, {syncs} host syncs "
        f"(sync debug mode), cudaStreamSynchronize {c.get('cudaStreamSynchronize', 0)}, "
        f"cudaDeviceSynchronize {c.get('cudaDeviceSynchronize', 0)}, DtoH copies "
        f"{c.get('memcpy_dtoh', 0)}, HtoD copies {c.get('memcpy_htod', 0)} | {c}"
    )


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--graph", choices=["biokg", "hetionet", "wikikg2", "small"], default="small")
    p.add_argument("--ratios", nargs="+", default=["dense", "0.02"])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--eval-batch", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rows", type=int, default=30, help="rows per profiler table")
    p.add_argument("--hetionet-raw", default="/work/shared/data/hetionet")
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    dev = args.device
    commit = git_commit("--short=12", mark_dirty=True)
    data = build_graph(args.graph, args.hetionet_raw)
    graph = graph_from_triples(data["num_nodes"], data["num_relations"], data["facts"]).to(dev)
    batches = Batches(data, data["num_relations"])
    text, result = [], {"graph": args.graph, "device": dev, "commit": commit, "configs": {}}
    if dev == "cuda":
        result["card"] = torch.cuda.get_device_name()
    for ratio in args.ratios:
        model = make_model(ratio, data, args.dim, dev).train()
        opt = torch.optim.Adam(model.parameters(), lr=2e-4)

        def draw():
            q, neg = batches.draw(args.batch, 32)
            q, neg = q.to(dev), neg.to(dev)
            return q, neg, graph.query_edge_mask(q, "one_hop")

        for _ in range(args.warmup):
            phases(model, opt, graph, *draw(), dev)
        timed = [phases(model, opt, graph, *draw(), dev) for _ in range(args.steps)]
        q, neg, mask = draw()
        syncs = count_syncs(phases, (model, opt, graph, q, neg, mask, dev), dev)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        q, neg, mask = draw()
        with torch.profiler.profile(activities=acts) as prof:
            phases(model, opt, graph, q, neg, mask, dev)
        launches = launch_counts(prof) if dev == "cuda" else {}
        # one evaluation forward: syncs, then launches (the model in eval mode, no grad)
        model.eval()
        eq, _ = batches.draw(args.eval_batch, 1)
        eq = eq.to(dev)

        def forward(model=model, eq=eq):
            with torch.no_grad():
                model(graph, eq[:, 0], eq[:, 1])
            sync(dev)

        forward()
        eval_syncs = count_syncs(forward, (), dev)
        with torch.profiler.profile(activities=acts) as eprof:
            forward()
        eval_launches = launch_counts(eprof) if dev == "cuda" else {}
        model.train()
        med = {k: statistics.median(t[k] for t in timed) for k in timed[0]}
        result["configs"][ratio] = {
            "phases_wall_s": med,
            "step_wall_s": sum(med.values()),
            "syncs": dict(syncs.most_common()),
            "sync_total": sum(syncs.values()),
            "launches": launches,
            "eval_batch": args.eval_batch,
            "eval_syncs": dict(eval_syncs.most_common()),
            "eval_sync_total": sum(eval_syncs.values()),
            "eval_launches": eval_launches,
        }
        head = f"== {args.graph} {ratio} on {dev}: " + ", ".join(
            f"{k} {v * 1e3:.1f} ms" for k, v in med.items()
        )
        text += [
            head,
            f"host syncs per step: {sum(syncs.values())} {dict(syncs.most_common(12))}",
            count_line(f"per training step (B {args.batch})", sum(syncs.values()), launches),
            count_line(
                f"per evaluation forward (B {args.eval_batch})",
                sum(eval_syncs.values()),
                eval_launches,
            ),
        ]
        sort_keys = ["self_cpu_time_total"] + (["self_cuda_time_total"] if dev == "cuda" else [])
        for key in sort_keys:
            text += [f"-- by {key}", prof.key_averages().table(sort_by=key, row_limit=args.rows)]
        print("\n".join(text[-4 - 2 * len(sort_keys) :]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pruned_profile_{dev}.txt").write_text("\n".join(text) + "\n")
    (out / f"pruned_profile_{dev}.json").write_text(json.dumps(result, indent=1) + "\n")
    for ratio, c in result["configs"].items():
        print(
            f"{ratio}: step {c['step_wall_s'] * 1e3:.1f} ms, syncs {c['sync_total']}, "
            f"launches {c['launches'].get('launch_api_calls')}, device kernels "
            f"{c['launches'].get('device_kernels')}, DtoH {c['launches'].get('memcpy_dtoh')}; "
            f"eval forward: syncs {c['eval_sync_total']}, launches "
            f"{c['eval_launches'].get('launch_api_calls')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
