"""CUDA check of the reference ops and the model: naive vs reference values and gradients on
the GPU, then the median time of one training step (B=64, fb237_v1-sized random graph) per
available implementation.  Prints one JSON object; also writes it to $OUT/gpu_check.json.

    python -m benchmarks.ops.gpu_check_reference
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.ops import available_impls, propagate

AGGS = ("sum", "sumsq", "max", "min")


def check_ops(dev: str) -> dict:
    rng = np.random.default_rng(0)
    facts = np.stack(
        [rng.integers(0, 40, 200), rng.integers(0, 4, 200), rng.integers(0, 40, 200)], 1
    )
    facts = np.concatenate([facts, [[i, 0, 0] for i in range(1, 40)]])  # hub
    g = graph_from_triples(45, 4, np.unique(facts, axis=0)).to(dev)  # 40..44 isolated
    gen = torch.Generator(device="cpu").manual_seed(0)
    worst = {}
    for message, per_query in (("mul", False), ("mul", True), ("basis", False)):
        x = torch.randn(45, 3, 5, generator=gen, dtype=torch.float64).to(dev).requires_grad_()
        if message == "mul":
            shape = (3, 8, 5) if per_query else (8, 5)
            rel = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dev).requires_grad_()
            leaves = [rel]
        else:
            rel = tuple(
                torch.randn(*s, generator=gen, dtype=torch.float64).to(dev).requires_grad_()
                for s in ((2, 5, 5), (8, 2))
            )
            leaves = list(rel)
        mask = torch.rand(g.num_edges, generator=gen).to(dev) > 0.2
        for ce in (64, 1 << 24):
            res = {}
            for impl in ("naive", "reference"):
                out = propagate(
                    g,
                    x,
                    rel,
                    message=message,
                    aggregators=AGGS,
                    edge_mask=mask,
                    impl=impl,
                    chunk_elements=ce,
                )
                loss = sum((out[a] * (i + 1)).sum() for i, a in enumerate(AGGS))
                res[impl] = [out[a] for a in AGGS] + list(torch.autograd.grad(loss, [x, *leaves]))
            err = max(
                float((a - b).detach().abs().max()) for a, b in zip(*res.values(), strict=True)
            )
            worst[f"{message}{'-per-query' if per_query else ''}-chunk{ce}"] = err
    return worst


def time_steps(dev: str, reps: int = 5) -> dict:
    rng = np.random.default_rng(0)
    n, r, f = 1594, 180, 4245
    facts = np.stack([rng.integers(0, n, f), rng.integers(0, r, f), rng.integers(0, n, f)], 1)
    g = graph_from_triples(n, r, facts).to(dev)
    heads = torch.randint(0, n, (64,), device=dev)
    rels = torch.randint(0, 2 * r, (64,), device=dev)
    out = {}
    for impl in [i for i in available_impls() if i != "scatter"]:
        torch.manual_seed(0)
        m = CMPNN(ModelConfig(), r, OpsConfig(impl=impl)).to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=5e-3)
        times = []
        try:
            for _ in range(reps + 1):
                torch.cuda.synchronize()
                t = time.perf_counter()
                opt.zero_grad()
                logits = m(g, heads, rels)
                torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, torch.zeros_like(logits)
                ).backward()
                opt.step()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            out[impl] = {"step_ms_median": 1000 * statistics.median(times[1:])}
        except Exception as exc:  # noqa: BLE001  (report, keep going)
            out[impl] = {"error": repr(exc)[:300]}
    return out


def main() -> None:
    dev = "cuda"
    result = {
        "device": torch.cuda.get_device_name(0),
        "available_impls": available_impls(),
        "max_abs_err_naive_vs_reference_float64": check_ops(dev),
        "train_step_basic_B64": time_steps(dev),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_check.json").write_text(text)


if __name__ == "__main__":
    main()
