"""Batch prediction vs filtered evaluation: queries per second on the same model and queries.

On the built-in rule KG (``conf/default.yaml``: 1,000 entities, 4 layers x 32), the test
facts whose ``(head, relation)`` and ``(tail, relation)`` keys are all distinct give 2F
rankings: ``rank_queries`` (what ``python -m cmpnn_dist.evaluate`` runs) ranks them both
directions; ``Predictor.predict_batch`` answers the same 2F queries by name (top 10 with
type restriction and known-fact flags); both with batches of 32.  Also: the median time of
one path explanation (``Predictor.explain``, k = 5).  Medians of ``--reps`` runs, side by
side in one process.  A random-initialised model: speed does not depend on the weights.

    python -m benchmarks.serving.predict_speed  # -> results/serving/predict_speed_<dev>.json
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import timed
from cmpnn_dist.config import Config
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.evaluation.ranking import rank_queries
from cmpnn_dist.model import CMPNN
from cmpnn_dist.predict import Predictor
from cmpnn_dist.storage import open_dataset

HERE = Path(__file__).resolve().parent


def distinct_facts(test: torch.Tensor) -> torch.Tensor:
    """Facts whose (h, r) and (t, r) keys occur once each (no shared forward pass)."""
    seen_t, seen_h, keep = set(), set(), []
    for i, (h, r, t) in enumerate(test.tolist()):
        if (h, r) not in seen_t and (t, r) not in seen_h:
            seen_t.add((h, r))
            seen_h.add((t, r))
            keep.append(i)
    return test[keep]


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--storage", default=None, help="storage root (default: a temp folder)")
    ap.add_argument("--out", default=str(results_dir(__file__)))
    args = ap.parse_args(argv)
    dev = args.device
    storage = args.storage or tempfile.mkdtemp(prefix="predict_speed_")
    cfg = Config()
    cfg.storage_root = storage
    cfg.model.num_layers, cfg.model.hidden_dim = 4, 32
    cfg.ops.impl = "auto"
    ds = open_dataset(ensure_dataset(cfg, progress=False))
    torch.manual_seed(0)
    model = CMPNN(cfg.model, ds.num_relations, cfg.ops).to(dev).eval()
    predictor = Predictor(model, ds, batch_size=args.batch, device=dev)
    gd = ds.graph_data("train")
    facts = distinct_facts(gd.facts("test"))
    filt = torch.cat([gd.facts(s) for s in ("train", "valid", "test")])
    names, rels = predictor.entities.names, predictor.relations.names
    h, r, t = facts.unbind(1)
    queries = pd.DataFrame(
        {
            "head": [names[i] for i in h.tolist()] + ["?"] * len(facts),
            "relation": [rels[i] for i in r.tolist()] * 2,
            "tail": ["?"] * len(facts) + [names[i] for i in t.tolist()],
        }
    )
    graph = predictor.graph

    def evaluate() -> None:
        rank_queries(
            model, graph, facts, filt, num_relations=ds.num_relations, batch_size=args.batch
        )

    def predict() -> None:
        predictor.predict_batch(queries, topk=10)

    n = 2 * len(facts)
    eval_ms = timed(evaluate, dev, args.reps, 1)
    pred_ms = timed(predict, dev, args.reps, 1)
    explain_ms = timed(
        lambda: predictor.explain_ids(int(h[0]), int(r[0]), int(t[0]), k=5), dev, args.reps, 1
    )
    card = torch.cuda.get_device_name() if dev == "cuda" else (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, {torch.get_num_threads()} threads"
    )  # fmt: skip
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    result = {
        "benchmark": "predict_speed",
        "device": card,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "commit": commit,
        "graph": f"rule_kg: {graph.num_nodes} nodes, {graph.num_edges} edges",
        "model": "4 layers x 32, sum, random init",
        "batch": args.batch,
        "rankings": n,
        "evaluate_ms": eval_ms,
        "predict_batch_ms": pred_ms,
        "evaluate_queries_per_s": n / eval_ms * 1e3,
        "predict_queries_per_s": n / pred_ms * 1e3,
        "predict_over_evaluate_time": pred_ms / eval_ms,
        "explain_ms": explain_ms,
        "reps": args.reps,
    }
    md = "\n".join(
        [
            "# Batch prediction vs filtered evaluation (rule KG)",
            "",
            f"- device: {card}; {result['platform']}; torch {torch.__version__}; commit {commit}",
            f"- {result['graph']}; {result['model']}; {n} queries (both directions), "
            f"batch {args.batch}; medians of {args.reps} runs",
            "",
            "| | ms | queries/s |",
            "|---|---|---|",
            f"| `rank_queries` (evaluate) | {eval_ms:.0f} | "
            f"{result['evaluate_queries_per_s']:.0f} |",
            f"| `Predictor.predict_batch` (top 10, names, types, known flags) | {pred_ms:.0f} | "
            f"{result['predict_queries_per_s']:.0f} |",
            "",
            f"predict / evaluate time: {result['predict_over_evaluate_time']:.2f}; "
            f"one path explanation (k = 5): {explain_ms:.0f} ms",
            "",
        ]
    )
    print(md)
    save_results(Path(args.out), f"predict_speed_{'cuda' if dev == 'cuda' else 'cpu'}", result, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
