"""Where pruned propagation loses Hits@10_50: test queries whose answer lies beyond the
message-passing horizon of the head, and the others.

A pruned model visits only nodes reached from the head (A*Net; ``cmpnn_dist.model.pruned``),
so an answer more than T hops from the head (T = number of layers) is never visited: it scores
the shared ``decoder(0, z_q)`` and, with pessimistic ties, ranks below every unvisited node.
The dense model gives every node a state from the layers' biases and its relations, so it
still ranks such answers.  For each run's per-query ranks (``ranks_test_all.parquet``) this
splits the test Hits@10_50 into the two groups:

    hits@10_50(q) = sum_{i=0}^{9} C(50, i) p^i (1 - p)^(50 - i),  p = rank / (candidates + 1)

(``--rule``, default ``paper``: the paper's code's rule, HxyScotthuang/CMPNN ``cmpnn/task.py``;
the others of :func:`cmpnn_dist.evaluation.metrics.hits_at_k_with_negatives`), reachable(q) =
dist(source, answer) <= T in the split's graph, contribution = sum over the group / all
queries.

    python -m benchmarks.studies.pruned_gap --dataset /tmp/pruned_accuracy/datasets/fb237_ind_v1 \\
        --runs /tmp/pruned_accuracy/runs/pruned-fb237_ind_v1-dense-s0-e2 ... --out gap.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from benchmarks.harness.args import make_parser

HERE = Path(__file__).resolve().parent


def within_hops(
    src: np.ndarray, dst: np.ndarray, num_nodes: int, sources: np.ndarray, hops: int
) -> np.ndarray:
    """bool [Q, N]: node v within ``hops`` directed edges of ``sources[q]`` (BFS on a CSR)."""
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=ptr[1:])
    nbr = dst[order]
    seen = np.zeros((len(sources), num_nodes), dtype=bool)
    for q, s in enumerate(sources):
        seen[q, s] = True
        frontier = np.array([s])
        for _ in range(hops):
            nxt = np.concatenate([nbr[ptr[u] : ptr[u + 1]] for u in frontier] or [frontier[:0]])
            nxt = np.unique(nxt[~seen[q, nxt]])
            seen[q, nxt] = True
            frontier = nxt
    return seen


def test_rankings(run: Path, rule: str = "paper") -> dict[str, np.ndarray]:
    """One run's test rankings (``ranks_test_all.parquet``): ``source`` / ``answer`` (the head
    and tail, swapped for head prediction), ``relation`` (the fact's, in [0, |R|)), ``tail``
    (bool: tail prediction) and ``hits`` (Hits@10_50 under ``eval.hits_negatives_rule`` ``rule``;
    ``paper``: the formula in the module docstring)."""
    import pyarrow.parquet as pq
    import torch

    from cmpnn_dist.evaluation.metrics import hits_at_k_with_negatives

    t = pq.read_table(run / "ranks_test_all.parquet").to_pydict()
    tail = np.array([d == "tail" for d in t["direction"]])
    ranks, cands = torch.tensor(t["rank"]), torch.tensor(t["candidates"])
    return {
        "source": np.where(tail, t["head"], t["tail"]),
        "answer": np.where(tail, t["tail"], t["head"]),
        "relation": np.asarray(t["relation"]),
        "tail": tail,
        "hits": hits_at_k_with_negatives(ranks, cands, 10, 50, rule).numpy(),
    }


def split_run(
    run: Path, reach: dict[tuple[int, int], bool], rule: str = "paper"
) -> dict[str, float]:
    """Hits@10_50 of one run's test ranks, overall and by reachability of the answer."""
    t = test_rankings(run, rule)
    pairs = zip(t["source"], t["answer"], strict=True)
    ok = np.array([reach[(int(a), int(b))] for a, b in pairs])
    h = t["hits"]
    return {
        "queries": len(h),
        "hits": float(h.mean()),
        "reachable": int(ok.sum()),
        "hits_reachable": float(h[ok].mean()),
        "contrib_reachable": float(h[ok].sum() / len(h)),
        "hits_beyond": float(h[~ok].mean()) if (~ok).any() else float("nan"),
        "contrib_beyond": float(h[~ok].sum() / len(h)),
    }


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--dataset", required=True, help="the prepared dataset folder of the runs")
    p.add_argument("--runs", nargs="+", required=True, help="run folders (same dataset)")
    p.add_argument("--hops", type=int, default=6, help="T: the models' number of layers")
    p.add_argument("--out", help="append the markdown table to this file")
    p.add_argument("--rule", default="paper", help="eval.hits_negatives_rule of Hits@10_50")
    args = p.parse_args(argv)

    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data

    data = load_train_data(open_dataset(Path(args.dataset)))
    g = data.test.graph
    src, dst = g.src.numpy(), g.dst().numpy()
    pairs = set()
    q = data.test.queries.numpy()
    for h, _, t in q:
        pairs |= {(int(h), int(t)), (int(t), int(h))}
    sources = np.array(sorted({a for a, _ in pairs}))
    seen = within_hops(src, dst, g.num_nodes, sources, args.hops)
    row = {int(s): i for i, s in enumerate(sources)}
    reach = {(a, b): bool(seen[row[a], b]) for a, b in pairs}
    lines = [
        f"\n{Path(args.dataset).name}: answers within {args.hops} hops of the source in the "
        f"test graph, test Hits@10_50 (eval.hits_negatives_rule={args.rule}) by group\n",
        "| run | hits@10_50 | within: n | within: hits | within: share of total "
        "| beyond: n | beyond: hits | beyond: share of total |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in map(Path, args.runs):
        r = split_run(run, reach, args.rule)
        lines.append(
            f"| {run.name} | {r['hits']:.3f} | {r['reachable']} | {r['hits_reachable']:.3f} "
            f"| {r['contrib_reachable']:.3f} | {r['queries'] - r['reachable']} "
            f"| {r['hits_beyond']:.3f} | {r['contrib_beyond']:.3f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
