"""Logic-planted tasks (paper section 5.2): which model family fits which formula.

Pairs (u, v) of a random graph are labelled by a formula (cmpnn_dist/wl/logic.py FORMULAS):

    compose                E>=1 z.(r0(x,z) and r1(z,y))                        rFO^3_cnt
    count2                 E>=2 z.(r0(x,z) and r1(z,y))                        rFO^3_cnt
    compose_not_edge       compose(x,y) and not r2(x,y)                        rFO^3_cnt
    count2_non_neighbours  E>=2 z.(r0(x,z) and not r1(z,y))                    erFO^3_cnt

The rFO tasks use ``regular_kg`` (each relation a union of fixed-point-free permutations: every
node has the same in/out degree per relation, so rwl_1^+ gives all nodes one colour); the erFO
task uses ``components_kg`` (many small components: most pairs are far apart, so only a global
readout can see x's out-degree from y).  Training graph seed s, test graph: a fresh graph from
the same generator (seed s + 1000).  Families, all 3 layers of 32 on the product's graph with
inverse edges, sum aggregation, INIT 2, MSG 1: ``cmpnn`` (no readout), ``cmpnn_readout``
(global sum readout), ``rmpnn`` (cmpnn_dist.wl.rmpnn: unary states, decoder MLP[h_u||h_v||z_q]).
Loss: class-balanced BCE over every tail of 16 random heads per step, Adam.  Reported:
balanced accuracy (mean of the true-positive and true-negative rates, chance = 0.5) over all
N^2 pairs of the training and the test graph, median over seeds.

    python -m benchmarks.wl.wl_logic [--steps 400] [--seeds 0 1] [--formulas ...]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic
from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.wl.logic import FORMULAS, components_kg, regular_kg
from cmpnn_dist.wl.rmpnn import RMPNN

RESULTS = results_dir(__file__)
FAMILIES = ("cmpnn", "cmpnn_readout", "rmpnn")
QUERY = 0


def make_graph(formula: str, seed: int):
    if FORMULAS[formula].readout:
        return components_kg(10, 8, [6, 6, 3], seed)
    return regular_kg(48, [4, 4, 1], seed)


def build(family: str, num_rel: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if family == "rmpnn":
        return RMPNN(2 * num_rel, 32, 3, "sum")
    cfg = ModelConfig(
        init=2,
        message=1,
        aggregate="sum",
        num_layers=3,
        hidden_dim=32,
        readout="sum" if family == "cmpnn_readout" else "none",
    )
    return CMPNN(cfg, num_rel, OpsConfig(impl="reference"))


def scores(model: torch.nn.Module, graph, heads: torch.Tensor) -> torch.Tensor:
    return model(graph, heads, torch.full_like(heads, QUERY))


def balanced(pred: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    pos, neg = labels, ~labels
    tpr = (pred & pos).sum() / max(pos.sum(), 1)
    tnr = (~pred & neg).sum() / max(neg.sum(), 1)
    return float((tpr + tnr) / 2), float((pred == labels).mean())


def evaluate(model: torch.nn.Module, graph, labels: np.ndarray) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = torch.cat(
            [scores(model, graph, h) for h in torch.arange(graph.num_nodes).split(64)]
        )
    model.train()
    return balanced(logits.numpy() > 0, labels)


def run(family: str, formula: str, seed: int, steps: int, lr: float) -> dict:
    train_kg, test_kg = make_graph(formula, seed), make_graph(formula, seed + 1000)
    phi = FORMULAS[formula]
    data = []
    for kg in (train_kg, test_kg):
        graph = graph_from_triples(kg.num_nodes, kg.num_relations, kg.triples())
        data.append((graph, phi.evaluate(kg)))
    graph, labels = data[0]
    y = torch.from_numpy(labels).float()
    pos = float(y.mean())
    weight_pos, weight_neg = 0.5 / max(pos, 1e-9), 0.5 / max(1 - pos, 1e-9)
    model = build(family, train_kg.num_relations, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for _ in range(steps):
        heads = torch.randint(0, graph.num_nodes, (16,), generator=gen)
        target = y[heads]
        w = torch.where(target > 0, weight_pos, weight_neg)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            scores(model, graph, heads), target, weight=w
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    train_bacc, train_acc = evaluate(model, *data[0])
    test_bacc, test_acc = evaluate(model, *data[1])
    return {
        "family": family,
        "formula": formula,
        "seed": seed,
        "positive_rate_train": pos,
        "positive_rate_test": float(data[1][1].mean()),
        "train_balanced_accuracy": train_bacc,
        "test_balanced_accuracy": test_bacc,
        "train_accuracy": train_acc,
        "test_accuracy": test_acc,
        "final_loss": float(loss.detach()),
        "train_seconds": seconds,
    }


def main() -> None:
    parser = make_parser(__doc__, __file__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--formulas", nargs="+", default=list(FORMULAS), choices=list(FORMULAS))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--out", default="wl_logic", help="result file stem in results/")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    jobs = [(f, p, s) for p in args.formulas for f in args.families for s in args.seeds]
    rows = []
    for family, formula, seed in tqdm(jobs, desc="wl_logic", file=sys.stderr):
        rows.append(run(family, formula, seed, args.steps, args.lr))
        tqdm.write(json.dumps(rows[-1]), file=sys.stderr)
    table = {}
    for formula in args.formulas:
        for family in args.families:
            sel = [r for r in rows if r["formula"] == formula and r["family"] == family]
            table.setdefault(formula, {})[family] = {
                k: statistics.median(r[k] for r in sel)
                for k in ("train_balanced_accuracy", "test_balanced_accuracy")
            }
    result = {
        "benchmark": "wl_logic",
        "command": command_line(__file__, sys.argv[1:]),
        "git_commit": git_commit("--short"),
        "machine": f"{platform.node()} {platform.machine()} {platform.platform()}, "
        f"{os.cpu_count()} cpus, {torch.get_num_threads()} torch threads",
        "steps": args.steps,
        "lr": args.lr,
        "seeds": args.seeds,
        "formulas": {f: FORMULAS[f].text() for f in args.formulas},
        "median": table,
        "runs": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / f"{args.out}.json", json.dumps(result, indent=2))
    lines = [
        "# Logic-planted tasks: balanced accuracy (train / test), median over seeds",
        "",
        f"`{result['command']}` at commit {result['git_commit']}, {result['machine']}.",
        f"{args.steps} Adam steps (lr {args.lr}) of 16 heads x all tails, seeds {args.seeds}; "
        "chance = 0.5.",
        "",
        "| formula | logic | " + " | ".join(args.families) + " |",
        "|---|---|" + "---|" * len(args.families),
    ]
    for formula in args.formulas:
        logic = "erFO (readout)" if FORMULAS[formula].readout else "rFO"
        cells = [
            f"{table[formula][f]['train_balanced_accuracy']:.3f} / "
            f"{table[formula][f]['test_balanced_accuracy']:.3f}"
            for f in args.families
        ]
        lines.append(f"| `{formula}` | {logic} | " + " | ".join(cells) + " |")
    lines += ["", "Formulas:", ""] + [f"- `{f}`: `{FORMULAS[f].text()}`" for f in args.formulas]
    write_atomic(RESULTS / f"{args.out}.md", "\n".join(lines) + "\n")
    print("\n".join(lines[5 : -len(args.formulas) - 3]))


if __name__ == "__main__":
    main()
