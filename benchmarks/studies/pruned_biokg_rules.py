"""Accuracy of pruned propagation where it is meant to be used: a graph in ogbl-biokg's shape
whose query relations follow planted rules (``synthetic:biokg_rules``), dense beside pruned.

Each cell is one run of the real CLI, ``conf=biokg`` (the paper's biokg hyperparameters: basic
C-MPNN 6 x 32, batch 8, 32 typed negatives, one-hop edge removal) on the generator at
``--scale`` (0.1: a tenth of biokg, on a CPU), with the same step budget for every cell, then
the typed test protocol (each test fact ranked against every entity of the answer's type, both
directions).  Cells: ``--ratios`` (``dense`` or a ``model.prune.node_ratio``, test ratio the
same) x ``--priors`` (``none`` / ``relations``: ``model.prior=relations``).  Per cell: test MRR
and Hits@10 (full typed ranking), and where the test answers lie: beyond the model's T layers
from the query's source in the training graph (no model can score them by propagation), and,
for pruned cells, answers the model did not visit
(``cmpnn_dist.model.pruned_visits.answers_visited``).

    python -m benchmarks.studies.pruned_biokg_rules --scale 0.1 --steps 500 --storage /work/bk

Cells already in the results file are skipped (``--redo`` runs them again); results:
``benchmarks/results/pruned_biokg_rules.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import git_commit
from benchmarks.harness.results import results_dir, write_atomic
from benchmarks.pruned.pruned_accuracy import last_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

LAYERS = 6  # conf/biokg.yaml's model.num_layers


def command(ratio: str, prior: str, args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable, "-m", "cmpnn_dist.train", "conf=biokg",
        f"data.name=biokg_rules_{args.scale}", "data.source=synthetic:biokg_rules",
        f"+data.synthetic.scale={args.scale}", "data.num_shards=1", "eval.protocol=typed",
        f"train.max_steps={args.steps}", f"train.lr={args.lr}", f"train.seed={args.seed}",
        "train.num_threads=1",
        "train.progress=false", f"storage_root={args.storage}", "resume=false",
        f"run_name=biokg_rules-{args.scale}-{ratio}-{prior}-s{args.seed}-n{args.steps}-lr{args.lr}",
    ]  # fmt: skip
    if ratio != "dense":
        cmd += ["model.propagation=pruned", f"model.prune.node_ratio={ratio}"]
    if prior != "none":
        cmd.append(f"model.prior={prior}")
    return cmd


def answers(run: Path, storage: str) -> dict:
    """Test answers beyond ``LAYERS`` hops and, for a pruned model, not visited."""
    import pyarrow.parquet as pq
    import torch

    from cmpnn_dist.model.pruned_visits import answers_visited
    from cmpnn_dist.runs.load import load_model
    from cmpnn_dist.training.data import load_train_data

    model, _, ds = load_model(run, [f"storage_root={storage}"])
    g = load_train_data(ds).test.graph
    t = pq.read_table(run / "ranks_test_typed.parquet").to_pydict()
    tail = np.array([d == "tail" for d in t["direction"]])
    src = np.where(tail, t["head"], t["tail"])
    dst = np.where(tail, t["tail"], t["head"])
    rel = np.where(tail, t["relation"], np.asarray(t["relation"]) + model.num_relations)
    n = g.num_nodes
    u, d = g.src.long(), g.dst().long()
    adj = torch.sparse_coo_tensor(  # [N, N]: adj[v, u] = 1 for an edge u -> v
        torch.stack([torch.cat([d, u]), torch.cat([u, d])]), torch.ones(2 * len(u)), (n, n)
    ).coalesce()  # both directions: the model's inverse edges
    within = np.zeros(len(src), dtype=bool)
    for i in range(0, len(src), 512):  # reach [N, 512] by LAYERS sparse products
        s = torch.as_tensor(src[i : i + 512])
        reach = torch.zeros(n, len(s))
        reach[s, torch.arange(len(s))] = 1.0
        for _ in range(LAYERS):
            reach = (reach + torch.sparse.mm(adj, reach)).clamp_(max=1.0)
        within[i : i + 512] = (
            reach[torch.as_tensor(dst[i : i + 512]), torch.arange(len(s))] > 0
        ).numpy()
    out = {"rankings": int(len(src)), "beyond_layers": int((~within).sum())}
    if model.pruned is not None:
        model.eval()
        visited = answers_visited(
            model, g, torch.as_tensor(src), torch.as_tensor(rel), torch.as_tensor(dst)
        )
        out["unvisited"] = int((~visited).sum())
        ranks = np.asarray(t["rank"])
        out["hits@10_visited"] = float((ranks[visited] <= 10).mean()) if visited.any() else None
    return out


def to_markdown(entries: list[dict], args: argparse.Namespace) -> str:
    lines = [
        "# Pruned propagation on a rule-planted graph in ogbl-biokg's shape",
        "",
        f"- command: `python -m benchmarks.studies.pruned_biokg_rules --scale {args.scale} "
        f"--lr {args.lr} "
        f"--seed {args.seed} --steps S --ratios R --priors P` (each cell's below)",
        "- machine: 2-core VM, no GPU, one torch thread per run, runs one after the other; "
        f"load: {args.load}",
        f"- commit: {git_commit('--short=12', mark_dirty=True)}; date: "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}",
        "- graph: `synthetic:biokg_rules` (biokg's 5 node types and sizes, its 51 relation "
        "signatures, skewed degrees; drug-disease, drug-drug_0, drug-sideeffect and "
        "protein-function follow planted 2-hop rules, valid / test facts are rule-added facts: "
        "`cmpnn_dist/convert/synthetic/biokg_rules.py`)",
        "- model and training: `conf=biokg` (basic C-MPNN 6 x 32, batch 8, 32 typed negatives, "
        f"one-hop edge removal) with `train.lr={args.lr}` (the preset's 2e-4 is for its 595 K-step "
        "epoch) and `train.max_steps` of the `steps` column (a reduced budget: 8 training "
        "queries a step), best = last (one validation at the end)",
        "- metrics: test MRR and Hits@10 of the typed protocol (every entity of the answer's "
        "type ranked, filtered, both directions, average ties); `beyond 6 hops`: test "
        "answers farther than the 6 layers from the query's source in the training graph; "
        "`unvisited`: answers the pruned model did not reach (scored by the constant "
        "`decoder(0, z_q)` or the prior alone); `hits@10 visited`: Hits@10 of the visited ones",
        "",
        "| propagation | prior | steps | test MRR | test Hits@10 | rankings | beyond 6 hops "
        "| unvisited | hits@10 visited | train+eval CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {r: i for i, r in enumerate(["dense", "0.05", "0.01", "0.005"])}
    for e in sorted(
        entries, key=lambda e: (e["prior"], e["key"][1], order.get(e["ratio"], 9), e["ratio"])
    ):
        a = e["answers"]
        hv = a.get("hits@10_visited")
        lines.append(
            f"| {'dense' if e['ratio'] == 'dense' else 'pruned ' + e['ratio']} | {e['prior']} "
            f"| {e['key'][1]} | {e['test']['mrr']:.3f} | {e['test']['hits@10']:.3f} "
            f"| {a['rankings']} "
            f"| {a['beyond_layers']} | {a.get('unvisited', 0)} "
            f"| {'' if hv is None else f'{hv:.3f}'} | {e['cpu_s']:.0f} |"
        )
    lines += ["", "Commands (one per cell):", ""]
    lines += [f"- `python {e['command']}`" for e in entries]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--scale", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument(
        "--lr", type=float, default=5e-3, help="conf/biokg.yaml's 2e-4 is for a 595 K-step epoch"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ratios", nargs="+", default=["dense", "0.05", "0.01", "0.005"])
    p.add_argument("--priors", nargs="+", default=["none", "relations"])
    p.add_argument("--storage", default="/tmp/pruned_biokg_rules")
    p.add_argument("--load", default="other jobs on the second core")
    p.add_argument("--redo", action="store_true")
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    path = Path(args.out) / "pruned_biokg_rules.json"
    entries = json.loads(path.read_text()) if path.is_file() else []
    for prior in args.priors:
        for ratio in args.ratios:
            key = (args.scale, args.steps, args.lr, args.seed, ratio, prior)
            done = [e for e in entries if tuple(e["key"]) == key]
            if done and not args.redo:
                continue
            cmd = command(ratio, prior, args)
            last, cpu = last_json(cmd)
            e = {
                "key": list(key), "ratio": ratio, "prior": prior, "test": last["test"],
                "valid": last["valid"], "cpu_s": round(cpu, 1),
                "answers": answers(Path(last["run_dir"]), args.storage),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
                "command": shlex.join(cmd[1:]),  # the markdown adds `python`
            }  # fmt: skip
            entries = [x for x in entries if tuple(x["key"]) != key] + [e]
            write_atomic(path, json.dumps(entries, indent=1))
            write_atomic(path.with_suffix(".md"), to_markdown(entries, args))
            print(
                f"{ratio} {prior}: mrr {e['test']['mrr']:.3f} hits@10 {e['test']['hits@10']:.3f} "
                f"{e['answers']} ({cpu:.0f} CPU s)",
                flush=True,
            )
    write_atomic(path.with_suffix(".md"), to_markdown(entries, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
