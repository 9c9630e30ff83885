"""A full C-MPNN training step on the biokg-scale graph: queries per second for each ops impl.

Model: MSG 1, INIT 2, f(t) = t, no readout, ``--layers`` (6) layers of d = 32, decoder 64,
layer norm and shortcut, with sum or PNA aggregation.  One step = the training loop's step:
query-edge removal mask, forward over the whole graph for B queries ([B, N] logits), the
self-adversarial BCE on the true tail and k = 32 negatives, backward, Adam.  Reported per
(aggregation, impl): median step seconds over ``--reps`` steps after a warm-up step, queries
per second (B / step), the peak memory of one step above what was allocated before it, and
the speed-up against ``reference`` measured in the same run.

    python -m benchmarks.step.train_step                  # CUDA if present, else CPU
    python -m benchmarks.step.train_step --device cpu --reps 2

CPU runs the chunked ``reference`` (and ``scatter`` when torch-scatter is importable); the
Triton ``fused`` kernels run on CUDA only (on CPU they would run in the slow interpreter) and
``naive`` materialises |E| x B x d messages per layer (about 10 GB each at B = 8, d = 32), so
both are skipped on CPU with that reason.  ``fused+graph`` (CUDA) replays the whole fused step
from one CUDA graph: the step without any host latency (see :func:`make_step`).  ``--small``
uses a 2,000-node random graph to check the script itself.  Writes
``benchmarks/results/train_step_<device>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.graphs import N_REL, load_graph
from benchmarks.harness.provenance import command_line
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import RssPeak
from benchmarks.ops.profile_fused import kernel_table
from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import Graph, graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.training.loss import self_adversarial_bce

HERE = Path(__file__).resolve().parent


def small_graph() -> Graph:
    rng = np.random.default_rng(0)
    facts = np.stack([rng.integers(0, 2000, 20_000), rng.integers(0, N_REL, 20_000),
                      rng.integers(0, 2000, 20_000)], axis=1)  # fmt: skip
    return graph_from_triples(2000, N_REL, facts)


def make_step(graph: Graph, aggregate: str, impl: str, args: argparse.Namespace):
    """A closure running one training step; the model and optimizer live inside it.

    ``impl`` ``<ops impl>+graph`` (CUDA): the whole step -- mask, forward, loss, backward, Adam
    -- is captured once in a CUDA graph (PyTorch's whole-network capture: warm-up on a side
    stream, Adam with ``capturable=True``) and replayed with each batch copied into the
    captured input tensors, so no Python or launch latency remains per step.
    """
    torch.manual_seed(0)
    ops_impl, graphed = impl.removesuffix("+graph"), impl.endswith("+graph")
    cfg = ModelConfig(aggregate=aggregate, num_layers=args.layers, hidden_dim=args.dim)
    model = CMPNN(cfg, graph.num_relations // 2, OpsConfig(impl=ops_impl)).to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3, capturable=graphed)
    gen = torch.Generator().manual_seed(1)
    n, b, k = graph.num_nodes, args.batch, args.negatives

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        """Random (h, r, t) [B, 3] and negatives [B, k], on the CPU."""
        heads = torch.randint(0, n, (b,), generator=gen)
        rels = torch.randint(0, graph.num_relations, (b,), generator=gen)
        tails = torch.randint(0, n, (b,), generator=gen)
        negs = torch.randint(0, n, (b, k), generator=gen)
        return torch.stack([heads, rels, tails], dim=1), negs

    def body(triples: torch.Tensor, negs: torch.Tensor) -> torch.Tensor:
        mask = graph.query_edge_mask(triples, "query")
        logits = model(graph, triples[:, 0], triples[:, 1], mask)  # [B, N]
        loss = self_adversarial_bce(
            logits.gather(1, triples[:, 2:3]).squeeze(1), logits.gather(1, negs), 1.0
        )
        loss.backward()
        opt.step()
        return loss

    if not graphed:

        def step() -> float:
            triples, negs = (t.to(args.device) for t in batch())
            opt.zero_grad(set_to_none=True)
            return float(body(triples, negs))

        return step

    triples_in, negs_in = (t.to(args.device) for t in batch())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: Triton autotunes, cached edge orders are built
        losses = []
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            losses.append(body(triples_in, negs_in))
        first_loss = float(losses[0])  # at initialisation, on the first batch (not replayed)
    torch.cuda.current_stream().wait_stream(side)
    cuda_graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(cuda_graph):
        loss_out = body(triples_in, negs_in)

    def graphed_step() -> float:
        triples, negs = batch()
        triples_in.copy_(triples)
        negs_in.copy_(negs)
        cuda_graph.replay()
        return float(loss_out)

    graphed_step.first_loss = first_loss
    return graphed_step


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def measure(graph: Graph, aggregate: str, impl: str, args: argparse.Namespace) -> dict:
    if args.device == "cuda":  # a captured step's memory is allocated at capture
        torch.cuda.synchronize()
        before_build = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    step = make_step(graph, aggregate, impl, args)
    loss = step()  # warm-up: Triton compiles / autotunes, cached CSR transposes are built
    # the loss at initialisation on the first batch: every impl sees the same model and batch
    first_loss = getattr(step, "first_loss", loss)
    sync(args.device)
    times = []
    for _ in range(args.reps):
        sync(args.device)
        t0 = time.perf_counter()
        step()
        sync(args.device)
        times.append(time.perf_counter() - t0)
    row = {"impl": impl, "step_s": statistics.median(times), "step_s_all": times}
    row["first_loss"] = first_loss
    row["queries_per_s"] = args.batch / row["step_s"]
    if args.device == "cuda" and impl.endswith("+graph"):
        # model, optimizer state and the graph's private pool, from before the build
        row["peak_gb"] = (torch.cuda.max_memory_allocated() - before_build) / 1e9
        row["peak_note"] = "includes model and optimizer state (allocated at capture)"
    elif args.device == "cuda":
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        sync("cuda")
        row["peak_gb"] = (torch.cuda.max_memory_allocated() - base) / 1e9
        # how much of the step the GPU spends in kernels (the rest: host launch latency)
        kernels = kernel_table(step, 2)
        row["kernel_ms_per_step"] = sum(k["ms"] for k in kernels)
        row["top_kernels"] = kernels[:8]
    else:
        with RssPeak() as p:
            step()
        row["peak_gb"] = (p.peak - p.base) / 1e9
    return row


def skip_reason(impl: str, dev: str, small: bool) -> str | None:
    if dev != "cuda" and impl.endswith("+graph"):
        return "skipped: CUDA graphs need a CUDA device"
    if dev != "cuda" and impl.startswith("fused"):
        return "skipped: Triton runs only interpreted on CPU"
    if dev != "cuda" and impl == "naive" and not small:
        return "skipped: E x B x d messages, ~10 GB per layer"
    if impl == "scatter":
        try:
            import torch_scatter  # noqa: F401
        except ImportError:
            return "skipped: torch-scatter is not installed"
    return None


def _loss_cell(row: dict, ref: dict | None) -> str:
    """'0.69315 (2e-07)': the first loss and its relative difference to the reference's."""
    if "first_loss" not in row:
        return "-"
    text = f"{row['first_loss']:.5f}"
    if ref is not None and ref is not row and "first_loss" in ref:
        diff = abs(row["first_loss"] - ref["first_loss"]) / max(abs(ref["first_loss"]), 1e-12)
        text += f" ({diff:.0e})"
    return text


def to_markdown(r: dict) -> str:
    lines = [
        f"# Full training step ({r['layers']} layers): {r['graph']}",
        "",
        f"- device: {r['device']}; torch {r['torch']}, python {r['python']}",
        f"- B = {r['batch']} queries, {r['negatives']} negatives, d = {r['dim']}; "
        f"median of {r['reps']} steps after one warm-up step",
        f"- command: `{r['command']}`",
        "- peak = extra memory during one step (CUDA allocator peak, or CPU RSS peak)",
        *(
            [f"- fused tuning space (E,C,warps,stages,hints,prefetch): {r['triton_configs']}"]
            if r.get("triton_configs")
            else []
        ),
        "",
        "- first loss = the loss at initialisation on the first batch (same model and batch "
        "for every impl), relative difference to the reference impl's in brackets",
        "",
        "| aggregation | impl | step s | queries/s | peak GB | vs reference | first loss | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for agg, rows in r["results"].items():
        ref = next((x for x in rows if x["impl"] == "reference" and "step_s" in x), None)
        for x in rows:
            if "step_s" not in x:
                lines.append(f"| {agg} | {x['impl']} | - | - | - | - | - | {x['error']} |")
                continue
            ratio = f"{ref['step_s'] / x['step_s']:.2f}x" if ref else "-"
            note = ""
            if "kernel_ms_per_step" in x:  # CUDA: the step's share spent in GPU kernels
                note = f"GPU kernels {x['kernel_ms_per_step'] / 1e3:.3f} s of the step"
            if x["impl"].endswith("+graph"):
                note = "whole step replayed from one CUDA graph; peak includes model + Adam"
            loss = _loss_cell(x, ref)
            lines.append(f"| {agg} | {x['impl']} | {x['step_s']:.3f} | {x['queries_per_s']:.3g} "
                         f"| {x['peak_gb']:.2f} | {ratio} | {loss} | {note} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=None, help="timed steps (default 10 CUDA, 2 CPU)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--negatives", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--aggregates", nargs="+", default=["sum", "pna"])
    ap.add_argument("--impls", nargs="+", default=["reference", "fused", "scatter", "naive"])
    ap.add_argument("--small", action="store_true", help="2,000-node graph (script check)")
    ap.add_argument("--graph-cache", default="/tmp/cmpnn_biokg_scale_csr.npz")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    args.reps = args.reps or (10 if args.device == "cuda" else 2)
    graph = (small_graph() if args.small else load_graph(Path(args.graph_cache))).to(args.device)
    if args.device == "cuda":
        card = torch.cuda.get_device_name()
        tag = "cuda_" + card.replace("NVIDIA ", "").split()[0].lower()
    else:
        card = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, " \
               f"{torch.get_num_threads()} torch threads"  # fmt: skip
        tag = "cpu"
    if args.small:
        tag += "_small"
    result = {
        "benchmark": "train_step",
        "graph": ("random 2,000 nodes" if args.small else "synthetic:biokg_scale")
        + f" ({graph.num_nodes} nodes, {graph.num_edges} edges, "
        f"{graph.num_relations} relation ids)",
        "device": card, "torch": torch.__version__, "python": platform.python_version(),
        "batch": args.batch, "negatives": args.negatives, "dim": args.dim, "layers": args.layers,
        "reps": args.reps, "command": command_line(__file__, argv or sys.argv[1:]),
        "results": {},
    }  # fmt: skip
    if os.environ.get("CMPNN_TRITON_CONFIGS"):  # the fused kernels' tuning space, if cut
        result["triton_configs"] = os.environ["CMPNN_TRITON_CONFIGS"]
    out = Path(args.out)
    for agg in args.aggregates:
        rows = result["results"].setdefault(agg, [])
        for impl in args.impls:
            reason = skip_reason(impl, args.device, args.small)
            if reason is None:
                try:
                    row = measure(graph, agg, impl, args)
                except Exception as exc:  # noqa: BLE001 - record (OOM) and go on
                    row = {"impl": impl, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            else:
                row = {"impl": impl, "error": reason}
            rows.append(row)
            print(agg, json.dumps(row), flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
            save_results(out, f"train_step_{tag}", result, to_markdown(result))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
