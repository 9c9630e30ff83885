"""Evaluation queries/s per protocol on the biokg-scale synthetic graph, and the projected time
of the full biokg test evaluation (162,870 facts, both directions).

The dataset is ``synthetic:biokg_scale`` (93,773 nodes in biokg's 5 types, 51 relations,
4.76 M training facts) converted to Arrow once under ``--storage``, loaded through the same
``load_train_data`` as training.  The model is the biokg preset's C-MPNN (6 x 32, sum, MSG 1,
decoder 32), untrained: scores do not change the work.  For each protocol the same first
``--facts`` test facts are ranked with :func:`cmpnn_dist.evaluation.rank_split` (both
directions, (node, relation) groups, ``--batch`` groups per forward pass):

* ``all``: filtered over every entity; ``typed``: filtered over the target's type;
* ``ogb``: 500 negative heads and tails per fact.  The synthetic graph has no official OGB
  negatives, so they are drawn here the way OGB drew them (uniformly from the head / tail
  type), then ranked and scored by ogb's Evaluator exactly as the real ones would be.

Reported per protocol: rankings/s, forward passes (groups)/s, the split of the time between
model forward and ranking, and peak RSS.  Projection for the full test split: its exact
number of (node, relation) groups (computed from the synthetic test split, 2 x 162,886
rankings: biokg's test has 162,870 facts) / batch x measured seconds per forward batch +
measured ranking seconds per query x 2 x 162,870.

    python -m benchmarks.step.eval_throughput            # ~6 minutes on 2 CPU cores
    python -m benchmarks.step.eval_throughput --small    # 1% scale graph, seconds (a smoke run)
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.results import results_dir
from benchmarks.harness.timing import RssPeak
from cmpnn_dist.config import ModelConfig, OpsConfig, PruneConfig  # noqa: E402
from cmpnn_dist.evaluation import metrics_of, rank_split  # noqa: E402
from cmpnn_dist.model import CMPNN  # noqa: E402

BIOKG_TEST_FACTS = 162_870
OUT = results_dir(__file__)


class TimedModel(torch.nn.Module):
    """Wraps the model; records the seconds of each forward batch.  The protocols rank the
    same facts, hence score the same (node, relation) batches: each batch is computed once
    (timed) and replayed for the next protocol, which is charged the first run's time."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.seconds: list[float] = []
        self._memo: dict[tuple, tuple[torch.Tensor, float]] = {}
        self.first_call: float | None = None

    def forward(self, graph, heads, rels, edge_mask=None):
        if self.first_call is None:
            self.first_call = time.perf_counter()
        key = (tuple(heads.tolist()), tuple(rels.tolist()))
        if key not in self._memo:
            sync(heads.device)
            t = time.perf_counter()
            out = self.model(graph, heads, rels, edge_mask)
            sync(heads.device)
            self._memo[key] = (out, time.perf_counter() - t)
            print(f"forward batch of {len(heads)}: {self._memo[key][1]:.3f} s", flush=True)
        out, seconds = self._memo[key]
        self.seconds.append(seconds)
        return out


def sync(device: torch.device) -> None:
    """Wait for the card, so that a forward batch's time is its own (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load(storage: Path, small: bool):
    from cmpnn_dist.convert import build_dataset
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data

    name = "biokg_scale_small" if small else "biokg_scale"
    path = storage / "datasets" / name
    if not (path / "manifest.json").is_file():
        params = {"scale": 0.01} if small else {}
        build_dataset("synthetic:biokg_scale", path, num_shards=4, name=name, synthetic=params)
    return load_train_data(open_dataset(path))


def ogb_like_negatives(facts: torch.Tensor, types: torch.Tensor, k: int) -> dict:
    """``k`` random heads of the head's type and tails of the tail's type per fact."""
    gen = torch.Generator().manual_seed(0)
    order = torch.argsort(types, stable=True)
    counts = torch.bincount(types)
    start = counts.cumsum(0) - counts

    def draw(nodes: torch.Tensor) -> torch.Tensor:
        t = types[nodes]
        u = (torch.rand(len(nodes), k, generator=gen) * counts[t, None]).long()
        return order[start[t, None] + u]

    return {"head_neg": draw(facts[:, 0]), "tail_neg": draw(facts[:, 2])}


def num_groups(facts: torch.Tensor, num_relations: int) -> int:
    h, r, t = facts[:, 0], facts[:, 1], facts[:, 2]
    keys = torch.cat([h * 2 * num_relations + r, t * 2 * num_relations + r + num_relations])
    return int(torch.unique(keys).numel())


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--storage", default="/tmp/cmpnn_eval_bench")
    ap.add_argument("--facts", type=int, default=8, help="test facts ranked per protocol")
    ap.add_argument("--batch", type=int, default=16, help="groups per forward pass")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--impl", default="reference", help="ops.impl (auto: fused on CUDA)")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--node-ratio",
        type=float,
        default=None,
        help="pruned propagation at this node ratio (model.propagation=pruned); default dense",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = load(Path(args.storage), args.small)
    load_s = time.perf_counter() - t0
    split = data.test
    types = split.node_types
    assert types is not None
    R, N = data.num_relations, data.num_nodes
    facts = split.queries[: args.facts]
    negatives = ogb_like_negatives(facts, types, 500)
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=6, hidden_dim=32, decoder_hidden_dim=32, aggregate="sum")
    if args.node_ratio is not None:
        cfg = dataclasses.replace(
            cfg, propagation="pruned", prune=PruneConfig(node_ratio=args.node_ratio)
        )
    device = torch.device(args.device)
    model = TimedModel(CMPNN(cfg, R, OpsConfig(impl=args.impl)).to(device))
    full_groups = num_groups(split.queries, R)
    from cmpnn_dist.evaluation.ogb_eval import ogb_lists

    ogb_lists(torch.zeros(2), torch.zeros(2, 3))  # import ogb and build its Evaluator untimed
    rows = []
    for protocol in ("all", "typed", "ogb"):
        model.seconds.clear()
        model.first_call = None
        with RssPeak() as rss:
            replayed = len(model._memo)
            t = time.perf_counter()
            table = rank_split(
                model,
                split.graph,
                facts,
                split.filter_triples,
                num_relations=R,
                protocol=protocol,
                ties="average",
                node_types=types,
                negatives=negatives,
                batch_size=args.batch,
            )
            wall = time.perf_counter() - t
        metrics = metrics_of(table)
        forward = sum(model.seconds)
        # once per split: the filter index (train + valid + test facts), query grouping
        setup = (model.first_call or t) - t
        wall -= setup
        # a replayed forward took ~0 s here: charge the time it took when it was computed
        wall += forward if replayed else 0.0
        q = table.rank.numel()
        groups = num_groups(facts, R)
        batches = len(model.seconds)
        per_batch = statistics.median(model.seconds)
        rank_per_query = (wall - forward) / q
        full_q = 2 * BIOKG_TEST_FACTS
        projected = (full_groups / args.batch) * per_batch + full_q * rank_per_query + setup
        rows.append(
            {
                "protocol": protocol,
                "rankings": q,
                "groups": groups,
                "forward_batches": batches,
                "setup_s": round(setup, 2),
                "wall_s": round(wall, 2),
                "forward_s": round(forward, 2),
                "ranking_s": round(wall - forward, 3),
                "median_forward_batch_s": round(per_batch, 3),
                "queries_per_s": round(q / wall, 3),
                "groups_per_s": round(groups / wall, 3),
                "peak_rss_gb": round(rss.peak / 1e9, 2),
                "projected_full_test_h": round(projected / 3600, 1),
                "projected_full_test_min": round(projected / 60, 1),
                "mrr_untrained": round(metrics["mrr"], 4),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    result = {
        "benchmark": "eval_throughput",
        "graph": "synthetic:biokg_scale" + (" scale=0.01" if args.small else ""),
        "num_nodes": N,
        "num_relations": R,
        "num_train_facts": int(len(data.train.queries)),
        "model": f"C-MPNN 6 x 32, sum, MSG 1, INIT 2, decoder 32 (biokg preset), ops {args.impl}"
        + (
            f", pruned propagation node_ratio {args.node_ratio}"
            if args.node_ratio is not None
            else ""
        ),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "eval_batch_groups": args.batch,
        "test_facts_ranked_per_protocol": int(len(facts)),
        "full_test": {
            "facts": BIOKG_TEST_FACTS,
            "rankings": 2 * BIOKG_TEST_FACTS,
            "groups_in_synthetic_test": full_groups,
            "forward_batches": -(-full_groups // args.batch),
        },
        "dataset_load_s": round(load_s, 1),
        "rows": rows,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "torch_threads": args.threads,
            "load_average_1_5_15": [round(x, 1) for x in os.getloadavg()],
            "torch": torch.__version__,
        },
        "git_commit": commit,
    }
    out = (
        Path(args.out)
        if args.out
        else OUT / ("eval_throughput_cpu" + ("_small" if args.small else ""))
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, out.with_suffix(".json"))
    md = [
        f"# Evaluation throughput, {result['graph']} ({result['device']})",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (shared: load average "
        f"{result['machine']['load_average_1_5_15']} at the end), torch threads {args.threads}, "
        f"commit {commit}.  Model: {result['model']}.  {len(facts)} test facts "
        f"({2 * len(facts)} rankings) per protocol, {args.batch} (node, relation) groups per "
        "forward pass, ties average.",
        "",
        "| protocol | rankings/s | groups/s | setup s | forward s | ranking s | peak RSS GB "
        "| median forward batch s | projected full test (h) | (min) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['protocol']} | {r['queries_per_s']} | {r['groups_per_s']} | {r['setup_s']} "
            f"| {r['forward_s']} "
            f"| {r['ranking_s']} | {r['peak_rss_gb']} | {r['median_forward_batch_s']} "
            f"| {r['projected_full_test_h']} | {r['projected_full_test_min']} |"
        )
    md += [
        "",
        f"Full biokg test: {2 * BIOKG_TEST_FACTS:,} rankings; the synthetic test split groups "
        f"its rankings into {full_groups:,} (node, relation) queries = "
        f"{result['full_test']['forward_batches']:,} forward passes of {args.batch}.  Projection "
        "= forward batches x median forward seconds + rankings x ranking seconds per ranking "
        "+ setup (filter index, grouping: once per split).  rankings/s and groups/s exclude "
        "the setup.  The protocols rank the same facts: the forward batch is computed once "
        "(first row) and each later row is charged its measured time; peak RSS of later rows "
        "excludes the forward.",
    ]
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(md) + "\n")
    os.replace(tmp, out.with_suffix(".md"))
    print("\n".join(md))


if __name__ == "__main__":
    main()
