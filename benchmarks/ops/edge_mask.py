"""Query-edge removal mask of one training step: ``Graph.query_edge_mask`` vs the obvious way.

On the biokg-scale graph (9,525,354 edges) with B = 8 queries and 32 negatives, for each
removal mode: the median milliseconds of ``query_edge_mask`` (sorted-key runs, no host sync)
and of the obvious implementation, ``~torch.isin(edge keys, query keys)`` over every edge,
measured side by side in one run; both masks are checked equal first.

    python -m benchmarks.ops.edge_mask      # writes benchmarks/results/edge_mask_<device>.json
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.graphs import load_graph
from benchmarks.harness.provenance import command_line
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import timed

HERE = Path(__file__).resolve().parent


def isin_mask(graph, triples: torch.Tensor, mode: str, negatives: torch.Tensor) -> torch.Tensor:
    """Keep-mask by testing every edge's key against the query keys (both directions)."""
    n, r2, half = graph.num_nodes, graph.num_relations, graph.num_relations // 2
    h, r, t = triples.unbind(1)
    src, dst = graph.src, graph.dst()
    if mode == "query":
        r_fwd = torch.where(r >= half, r - half, r)
        h_fwd, t_fwd = torch.where(r >= half, t, h), torch.where(r >= half, h, t)
        query = torch.cat(
            [(h_fwd * r2 + r_fwd) * n + t_fwd, (t_fwd * r2 + r_fwd + half) * n + h_fwd]
        )
        keys = (src * r2 + graph.rel) * n + dst
    else:
        tails = t[:, None] if mode == "one_hop" else torch.cat([t[:, None], negatives], 1)
        a, b = h[:, None].expand_as(tails).reshape(-1), tails.reshape(-1)
        query = torch.cat([a * n + b, b * n + a])
        keys = src * n + dst
    return ~torch.isin(keys, query)


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--graph-cache", default="/tmp/cmpnn_biokg_scale_csr.npz")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    dev = args.device
    graph = load_graph(Path(args.graph_cache)).to(dev)
    gen = torch.Generator().manual_seed(0)
    picks = torch.randint(0, graph.num_edges, (8,), generator=gen).to(dev)
    triples = torch.stack([graph.src[picks], graph.rel[picks], graph.dst()[picks]], 1)
    negatives = torch.randint(0, graph.num_nodes, (8, 32), generator=gen).to(dev)
    rows = []
    for mode in ("query", "one_hop", "candidates"):
        fast = graph.query_edge_mask(triples, mode, negatives=negatives)  # also fills the cache
        slow = isin_mask(graph, triples, mode, negatives)
        assert torch.equal(fast, slow), mode
        row = {"mode": mode, "removed_edges": int((~fast).sum())}
        row["query_edge_mask_ms"] = timed(
            lambda m=mode: graph.query_edge_mask(triples, m, negatives=negatives), dev, args.reps, 1
        )
        row["isin_ms"] = timed(
            lambda m=mode: isin_mask(graph, triples, m, negatives), dev, args.reps, 1
        )
        row["speedup"] = row["isin_ms"] / row["query_edge_mask_ms"]
        rows.append(row)
        print(f"{mode}: query_edge_mask {row['query_edge_mask_ms']:.2f} ms, isin "
              f"{row['isin_ms']:.2f} ms ({row['speedup']:.0f}x), {row['removed_edges']} "
              "edges removed")  # fmt: skip
    card = torch.cuda.get_device_name() if dev == "cuda" else (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} threads"
    )  # fmt: skip
    result = {
        "benchmark": "edge_mask",
        "graph": f"synthetic:biokg_scale ({graph.num_nodes} nodes, {graph.num_edges} edges)",
        "device": card,
        "torch": torch.__version__,
        "command": command_line(__file__, argv or sys.argv[1:]),
        "batch": 8,
        "negatives": 32,
        "reps": args.reps,
        "rows": rows,
    }
    tag = "cuda" if dev == "cuda" else "cpu"
    save_results(Path(args.out), f"edge_mask_{tag}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
