"""Where a pruned run's test Hits@10_50 comes from: answers within the heads' T-hop horizon that
the model visited, those it did not visit, and answers beyond the horizon (never visited).

For each pruned run folder the checkpoint is loaded (``cmpnn_dist.runs.load``) and each
test ranking's source is propagated once more with the priors switched off
(``model.pruned.unvisited = None``, ``model.prior = None``: the priors do not choose the
subgraph, so the same nodes are visited; every unvisited candidate then scores
``decoder(0, z_q)`` exactly), so the answer was visited iff its score differs from that
constant.  Per group: rankings, Hits@10_50 of the run's own ranks (``ranks_test_all.parquet``,
``--rule``, default ``paper``: the paper's code's rule, :func:`pruned_gap.test_rankings`) and
the group's share of the total (shares add up to it).  Dense runs count every answer as
visited.

    python -m benchmarks.studies.pruned_unvisited \\
        --runs /tmp/pa2/runs/pruned-fb237_ind_v1-0.1-s0-e2 \\
        /tmp/pa2/runs/pruned-fb237_ind_v1-0.1-rel-s0-e2 --storage /tmp/pa2 --out OUT.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness.args import make_parser
from benchmarks.studies.pruned_gap import test_rankings, within_hops
from cmpnn_dist.model.pruned_visits import answers_visited

HERE = Path(__file__).resolve().parent


def split(run: Path, storage: str, hops: int, rule: str = "paper") -> dict:
    """The three groups of one run (see the module docstring)."""
    from cmpnn_dist.runs.load import load_model
    from cmpnn_dist.training.data import load_train_data

    model, _, ds = load_model(run, [f"storage_root={storage}"])
    g = load_train_data(ds).test.graph
    t = test_rankings(run, rule)
    src, dst = torch.as_tensor(t["source"]), torch.as_tensor(t["answer"])
    rel = torch.as_tensor(np.where(t["tail"], t["relation"], t["relation"] + model.num_relations))
    visited = answers_visited(model, g, src, rel, dst)
    seen = within_hops(g.src.numpy(), g.dst().numpy(), g.num_nodes, t["source"], hops)
    within = seen[np.arange(len(src)), t["answer"]]
    hits = t["hits"]
    groups = {
        "visited, within": visited & within,
        "unvisited, within": ~visited & within,
        "beyond": ~within,  # never visited by a pruned model; dense ranks them all the same
    }
    out = {"run": run.name, "hits": float(hits.mean()), "queries": len(hits)}
    for name, m in groups.items():
        out[name] = (int(m.sum()), float(hits[m].mean()) if m.any() else float("nan"),
                     float(hits[m].sum() / len(hits)))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--runs", nargs="+", required=True, help="run folders")
    p.add_argument("--storage", required=True, help="the runs' storage_root")
    p.add_argument("--hops", type=int, default=6, help="T: the models' number of layers")
    p.add_argument("--out", help="append the markdown table to this file")
    p.add_argument("--rule", default="paper", help="eval.hits_negatives_rule of Hits@10_50")
    args = p.parse_args(argv)
    names = ("visited, within", "unvisited, within", "beyond")
    lines = [
        f"Hits@10_50 under eval.hits_negatives_rule={args.rule}",
        "",
        "| run | hits@10_50 | " + " | ".join(f"{n}: n / hits / share" for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for run in map(Path, args.runs):
        r = split(run, args.storage, args.hops, args.rule)
        cells = " | ".join(f"{r[n][0]} / {r[n][1]:.3f} / {r[n][2]:.3f}" for n in names)
        lines.append(f"| {r['run']} | {r['hits']:.3f} | {cells} |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
