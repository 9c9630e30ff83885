"""bf16 against fp32 training steps on the biokg-scale graph (CUDA; CPU only to check the script).

The models, graph and batches are :mod:`pruned_speed`'s (same seeds): ``dense`` (the fused
kernels on CUDA) and node ratios (pruned propagation), 6 x 32 on ``synthetic:biokg_scale``.
One step is the training loop's (:meth:`Trainer.train_step`): query-edge mask (``one_hop``),
the forward under ``torch.autocast(bfloat16)`` for ``bf16`` (as ``train.precision=bf16``
does) or plain for ``fp32``, the logits cast to float32, the self-adversarial loss over 32
typed negatives, backward, Adam.  Per (config, precision): one untimed warm-up step, then
``--rounds`` rounds interleaved over every pair with the same batch in a round; reported: the
median wall seconds per query, the bf16 speed-up over fp32 of the same config, the CUDA
memory peak, and the first timed round's loss (same initial weights and batch for both
precisions, so the bf16 loss's relative difference to fp32's is the rounding's effect on one
step).

    python -m benchmarks.step.gpu_precision --device cuda --configs dense 0.005 --batch 8
    python -m benchmarks.step.gpu_precision --graph small --device cpu --rounds 2   # script check

Writes ``<out>/gpu_precision_<device>.json`` and ``.md``.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, save_results
from benchmarks.pruned.pruned_speed import Batches, build_graph, make_model
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.training.loss import self_adversarial_bce

HERE = Path(__file__).resolve().parent

PRECISIONS = ("fp32", "bf16")


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def train_step(model, opt, graph, q, neg, mask, precision: str, dev: str) -> float:
    """One training step as the trainer runs it; returns the loss (float32)."""
    ctx = (
        torch.autocast(device_type=dev, dtype=torch.bfloat16)
        if precision == "bf16"
        else contextlib.nullcontext()
    )
    with ctx:
        logits = model(graph, q[:, 0], q[:, 1], mask)
    logits = logits.float()
    loss = self_adversarial_bce(logits.gather(1, q[:, 2:3]).squeeze(1), logits.gather(1, neg), 0.5)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def to_markdown(r: dict) -> str:
    lines = [
        f"# bf16 against fp32 training steps: {r['graph']} ({r['device']})",
        "",
        f"- command: `{r['command']}`; commit {r['commit']}; {r['when_utc']} UTC; "
        f"torch {r['torch']}",
        f"- {r['layers']} x {r['dim']}, B {r['batch']}, 32 typed negatives; median wall s per "
        f"query of {r['rounds']} interleaved rounds after one warm-up step per pair",
        "- first loss: the first timed round's loss (same weights and batch for both "
        "precisions); bf16's relative difference to fp32's in brackets",
        "",
        "| config | precision | step s | s / query | queries/s | bf16 speed-up | peak GB "
        "| first loss | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cfg, by_prec in r["configs"].items():
        fp = by_prec.get("fp32", {})
        for prec, x in by_prec.items():
            if "error" in x:
                lines.append(f"| {cfg} | {prec} | - | - | - | - | - | - | {x['error']} |")
                continue
            up, loss = "", f"{x['first_loss']:.5f}"
            if prec == "bf16" and "step_s" in fp:
                up = f"{fp['step_s'] / x['step_s']:.2f}x"
                rel = abs(x["first_loss"] - fp["first_loss"]) / max(abs(fp["first_loss"]), 1e-12)
                loss += f" ({rel:.1e})"
            lines.append(
                f"| {cfg} | {prec} | {x['step_s']:.4f} | {x['s_per_query']:.5f} "
                f"| {x['queries_per_s']:.1f} | {up} | {x['peak_gb']:.2f} | {loss} | |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--graph", choices=["biokg", "small"], default="biokg")
    p.add_argument("--configs", nargs="+", default=["dense", "0.005"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    dev = args.device
    commit = git_commit("--short=12", mark_dirty=True)
    t0 = time.perf_counter()
    data = build_graph(args.graph, None)
    graph = graph_from_triples(data["num_nodes"], data["num_relations"], data["facts"]).to(dev)
    print(f"{args.graph}: built in {time.perf_counter() - t0:.0f} s", flush=True)
    batches = Batches(data, data["num_relations"])
    pairs = [(c, pr) for c in args.configs for pr in PRECISIONS]
    models, opts, times, losses, peaks, errors = {}, {}, {}, {}, {}, {}
    for pair in pairs:
        models[pair] = make_model(pair[0], data, args.dim, dev).train()
        opts[pair] = torch.optim.Adam(models[pair].parameters(), lr=2e-4)
        times[pair], peaks[pair] = [], 0
    result = {
        "benchmark": "gpu_precision",
        "graph": args.graph,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "torch": torch.__version__,
        "commit": commit,
        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": command_line(__file__, sys.argv[1:]),
        "layers": data["layers"],
        "dim": args.dim,
        "batch": args.batch,
        "rounds": 0,
        "configs": {},
    }
    out = Path(args.out)

    def summarise() -> None:
        for c, pr in pairs:
            row = result["configs"].setdefault(c, {})
            if (c, pr) in errors:
                row[pr] = {"error": errors[c, pr]}
            elif times[c, pr]:
                step = statistics.median(times[c, pr])
                row[pr] = {
                    "step_s": step,
                    "s_per_query": step / args.batch,
                    "queries_per_s": args.batch / step,
                    "steps_s": times[c, pr],
                    "peak_gb": peaks[c, pr] / 1e9,
                    "first_loss": losses[c, pr],
                }
        save_results(out, f"gpu_precision_{dev}", result, to_markdown(result))

    for rnd in range(-1, args.rounds):  # round -1: the untimed warm-up (Triton compiles)
        q, neg = (t.to(dev) for t in batches.draw(args.batch, 32))
        mask = graph.query_edge_mask(q, "one_hop")
        for pair in pairs:
            if pair in errors:
                continue
            try:
                if dev == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                sync(dev)
                t = time.perf_counter()
                loss = train_step(models[pair], opts[pair], graph, q, neg, mask, pair[1], dev)
                sync(dev)
                wall = time.perf_counter() - t
            except Exception as exc:  # noqa: BLE001 - record (unsupported dtype, OOM), go on
                errors[pair] = f"{type(exc).__name__}: {str(exc)[:200]}"
                print(pair, errors[pair], flush=True)
                continue
            if rnd < 0:
                continue
            times[pair].append(wall)
            losses.setdefault(pair, float(loss))
            if dev == "cuda":
                peaks[pair] = max(peaks[pair], torch.cuda.max_memory_allocated())
            print(
                f"round {rnd} {pair[0]} {pair[1]}: {wall:.4f} s, loss {float(loss):.5f}", flush=True
            )
        result["rounds"] = rnd + 1
        summarise()
    print(to_markdown(result))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
