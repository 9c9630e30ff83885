"""Pruned propagation beside the dense model: training step and evaluation forward on the
biokg-scale, Hetionet-schema and wikikg2-scale synthetic graphs (CPU or CUDA).

Graphs are generated in memory (no Arrow dataset): ``biokg`` = ``synthetic:biokg_scale``'s
training facts (93,773 nodes, 4.76 M facts, 51 relations; 6 x 32 as the paper's biokg
table), ``hetionet`` = ``synthetic:hetionet_schema`` (Hetionet's node table from
``--hetionet-raw`` when present, metaedge counts; 80 % of the facts as the training graph;
4 x 32), ``wikikg2`` = 2.5 M nodes, 16 M power-law facts, 535 relations (ogbl-wikikg2's sizes;
6 x 32; pruned only: one dense float32 state tensor N x B x d alone is 2.6 GB per layer).

Each configuration (``dense`` or a node ratio; degree ratio 1) gets its own C-MPNN (same
initial weights) and Adam.  One *training step* = query-edge mask (``one_hop``), forward,
self-adversarial loss over 32 typed negatives, backward, Adam step, on B queries (half of them
head predictions through the inverse relation); one *evaluation forward* = ``model.eval()``
scores of all N candidates for ``--eval-batch`` queries.  Configurations are interleaved
round by round (same batch in a round) and the median over ``--rounds`` rounds is reported:
CPU-s (process time, all threads) and wall s per query, the RSS peak during the config's
steps and its increase over the RSS before them, and edges / packed nodes per layer and query
(``model.pruned.last_stats``).  Projections: one epoch = F training queries x CPU-s per query;
full typed test ranking = 2 x test facts x evaluation CPU-s per query (one forward per
ranking: an upper bound, rankings of one (node, relation) group share a forward).

    python -m benchmarks.pruned.pruned_speed --graph biokg --ratios dense 0.5 0.2 0.1 0.05
    python -m benchmarks.pruned.pruned_speed --graph small --rounds 2     # seconds: smoke run
    python -m benchmarks.pruned.pruned_speed --graph biokg --device cuda  # GPU (wall s, CUDA mem)

Results: ``benchmarks/results/pruned_speed_<device>.json`` / ``.md`` (one entry per graph).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, save_results
from benchmarks.harness.timing import RssPeak
from cmpnn_dist.config import ModelConfig, OpsConfig, PruneConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.training.loss import self_adversarial_bce

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

TEST_FACTS = {"biokg": 162_870, "hetionet": 225_020, "wikikg2": 429_456, "small": 1_000}


def build_graph(name: str, hetionet_raw: str | None) -> dict:
    """-> {"facts" [F, 3] training facts, "num_nodes", "num_relations", "node_type" [N],
    "layers", "test_groups": the (node, relation) queries the generated test split's rankings
    group into (one forward each; None where the graph has no test split here)}."""
    if name in ("biokg", "small"):
        from benchmarks.step.eval_throughput import num_groups
        from cmpnn_dist.convert.synthetic.biokg_scale import generate

        g = generate({"scale": 0.01} if name == "small" else None)
        facts, types = g["facts"]["train"], np.asarray(g["node_types"])
        groups = num_groups(torch.from_numpy(np.asarray(g["facts"]["test"], np.int64)), 51)
        return dict(
            facts=facts,
            num_nodes=len(types),
            num_relations=51,
            node_type=types,
            layers=6,
            test_groups=groups,
        )
    if name == "hetionet":
        from cmpnn_dist.convert.synthetic.hetionet_schema import generate

        raw = hetionet_raw if hetionet_raw and Path(hetionet_raw).is_dir() else None
        g = generate(None, raw)
        triples = g["triples"]
        kinds = np.asarray(g["nodes"].column("kind").to_numpy(zero_copy_only=False))
        _, types = np.unique(kinds, return_inverse=True)
        rng = np.random.default_rng(0)
        train = triples[rng.permutation(len(triples))[: int(0.8 * len(triples))]]
        return dict(
            facts=train,
            num_nodes=len(kinds),
            num_relations=len(g["relation_names"]),
            node_type=types,
            layers=4,
        )
    if name == "wikikg2":
        rng = np.random.default_rng(0)
        n, f, r = 2_500_604, 16_109_182, 535
        rank = rng.permutation(n)
        p = (np.arange(n) + 1.0) ** -0.8
        p /= p.sum()
        h = rank[rng.choice(n, f, p=p)]
        t = rank[rng.choice(n, f, p=p)]
        rel = rng.choice(r, f, p=(s := (np.arange(r) + 1.0) ** -1.1) / s.sum())
        facts = np.stack([h, rel, t], 1).astype(np.int64)
        return dict(
            facts=facts,
            num_nodes=n,
            num_relations=r,
            node_type=np.zeros(n, dtype=np.int64),
            layers=6,
        )
    raise ValueError(name)


class Batches:
    """Training queries (both directions) with typed negatives, the same for every config."""

    def __init__(self, data: dict, num_rel: int, seed: int = 0):
        self.facts = torch.from_numpy(np.ascontiguousarray(data["facts"]))
        types = torch.from_numpy(np.asarray(data["node_type"], dtype=np.int64))
        self.order = torch.argsort(types, stable=True)
        count = torch.bincount(types)
        self.start, self.count, self.types = torch.cumsum(count, 0) - count, count, types
        self.num_rel = num_rel
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, b: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """-> queries [b, 3] (h, r, t) with r in [0, 2R), negatives [b, k] of t's type."""
        q = self.facts[torch.randint(0, len(self.facts), (b,), generator=self.gen)].clone()
        inv = torch.arange(b) % 2 == 1
        q[inv] = torch.stack([q[inv, 2], q[inv, 1] + self.num_rel, q[inv, 0]], 1)
        ty = self.types[q[:, 2]]
        off = (torch.rand(b, k, generator=self.gen) * self.count[ty].unsqueeze(1)).long()
        return q, self.order[self.start[ty].unsqueeze(1) + off]


def make_model(ratio: str, data: dict, dim: int, dev: str) -> CMPNN:
    """``dense``, a node ratio, ``RATIO:torch-select`` (the torch selection path instead of
    the compiled CPU one: ``PrunedPropagation.compiled_select = False``), ``RATIO:relations``
    (``model.prune.unvisited=relations``), ``RATIO:relationsK`` (and ``unvisited_hops=K``),
    ``RATIO:prior`` or ``RATIO:priorK`` (``model.prior=relations``, ``prior_hops=K``; also
    ``dense:prior``)."""
    ratio, _, variant = ratio.partition(":")
    kind = "relations" if variant.startswith("relations") else "prior"
    hops = variant.removeprefix(kind)
    if variant not in ("", "torch-select") and not (
        variant.startswith(kind) and (hops == "" or hops.isdigit())
    ):
        raise ValueError(
            f"unknown config variant {variant!r} (known: torch-select, relations, relationsK, "
            "prior, priorK)"
        )
    kw, prior = {}, {}
    if variant.startswith("relations"):
        kw = dict(unvisited="relations", unvisited_hops=int(hops or PruneConfig.unvisited_hops))
    elif variant.startswith("prior"):
        prior = dict(prior="relations", prior_hops=int(hops or ModelConfig.prior_hops))
    prune = PruneConfig(**kw) if ratio == "dense" else PruneConfig(node_ratio=float(ratio), **kw)
    cfg = ModelConfig(
        num_layers=data["layers"],
        hidden_dim=dim,
        decoder_hidden_dim=dim,
        propagation="dense" if ratio == "dense" else "pruned",
        prune=prune,
        **prior,
    )
    torch.manual_seed(0)
    model = CMPNN(cfg, data["num_relations"], OpsConfig()).to(dev)
    if variant == "torch-select":
        model.pruned.compiled_select = False
    return model


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(fn, dev: str) -> tuple[float, float, int, int]:
    """-> (wall s, CPU s, peak RSS bytes, RSS increase) of ``fn()``."""
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = rss()
    with RssPeak() as peak:
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if dev == "cuda":
        return wall, cpu, torch.cuda.max_memory_allocated(), torch.cuda.max_memory_allocated()
    return wall, cpu, peak.peak, peak.peak - before


def per_layer(model: CMPNN, graph, mask: torch.Tensor | None, b: int) -> dict:
    if model.pruned is None:
        e = int(mask.sum()) if mask is not None else graph.num_edges
        return {"edges": [e] * len(model.layers), "nodes": [graph.num_nodes] * len(model.layers)}
    st = model.pruned.last_stats
    return {"edges": [round(s[1] / b) for s in st], "nodes": [round(s[2] / b) for s in st]}


def run(args: argparse.Namespace, save=None) -> dict:
    """Time every config; ``save(result)`` after every round (a run cut short keeps the
    medians of the rounds it finished)."""
    dev = args.device
    # the code that runs: read before this run writes its own results files (which would mark
    # the tree dirty)
    args.commit = git_commit("--short=12", mark_dirty=True)
    t0 = time.perf_counter()
    data = build_graph(args.graph, args.hetionet_raw)
    graph = graph_from_triples(data["num_nodes"], data["num_relations"], data["facts"]).to(dev)
    print(
        f"{args.graph}: N={graph.num_nodes:,} E={graph.num_edges:,} "
        f"built in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    batches = Batches(data, data["num_relations"])
    models = {r: make_model(r, data, args.dim, dev) for r in args.ratios}
    opts = {r: torch.optim.Adam(m.parameters(), lr=2e-4) for r, m in models.items()}
    rows = {r: {"train": [], "eval": []} for r in args.ratios}
    rss_data = rss()
    if args.warmup:  # per-graph indexes (out-edge CSR, transposed copy) are built once, untimed
        q, _ = batches.draw(args.batch, 1)
        mask = graph.query_edge_mask(q.to(dev), "one_hop")
        for model in models.values():
            model.train()
            model(graph, q[:, 0].to(dev), q[:, 1].to(dev), mask).sum().backward()
            model.zero_grad(set_to_none=True)
    for rnd in range(args.rounds):
        q, neg = batches.draw(args.batch, 32)
        q, neg = q.to(dev), neg.to(dev)
        eq, _ = batches.draw(args.eval_batch, 1)
        eq = eq.to(dev)
        mask = graph.query_edge_mask(q, "one_hop")
        for r, model in models.items():
            model.train()

            def step(model=model, r=r, q=q, neg=neg, mask=mask):
                logits = model(graph, q[:, 0], q[:, 1], mask)
                loss = self_adversarial_bce(
                    logits.gather(1, q[:, 2:3]).squeeze(1), logits.gather(1, neg), 0.5
                )
                loss.backward()
                opts[r].step()
                opts[r].zero_grad(set_to_none=True)

            w, c, pk, inc = timed(step, dev)
            layers = per_layer(model, graph, mask, args.batch)
            rows[r]["train"].append(dict(wall=w, cpu=c, peak=pk, inc=inc, **layers))
            model.eval()

            def forward(model=model, eq=eq):
                with torch.no_grad():
                    model(graph, eq[:, 0], eq[:, 1])

            if rnd < args.eval_rounds:
                w, c, pk, inc = timed(forward, dev)
                rows[r]["eval"].append(dict(wall=w, cpu=c, peak=pk, inc=inc))
            print(
                f"{args.graph} round {rnd} {r}: train {rows[r]['train'][-1]['wall']:.2f} s "
                f"({rows[r]['train'][-1]['cpu']:.2f} CPU s), eval {rows[r]['eval'][-1]['cpu']:.2f} "
                "CPU s, edges/layer "
                f"{layers['edges']}",
                file=sys.stderr,
                flush=True,
            )
            result = summarise(args, data, graph, rows, rss_data, rnd + 1)
            if save is not None:  # after every config: a run cut short keeps what it timed
                save(result)
    return result


def summarise(
    args: argparse.Namespace, data: dict, graph, rows: dict, rss_data: int, done: int
) -> dict:
    """The result entry from the rounds timed so far (``done`` of them)."""
    dev = args.device
    f_train, tests = len(data["facts"]), TEST_FACTS[args.graph]
    out = {}
    for r, row in rows.items():
        tr, ev = row["train"], row["eval"] or [dict(wall=math.nan, cpu=math.nan, peak=0, inc=0)]
        if not tr:
            continue
        tcpu = statistics.median(x["cpu"] for x in tr) / args.batch
        twall = statistics.median(x["wall"] for x in tr) / args.batch
        ecpu = statistics.median(x["cpu"] for x in ev) / args.eval_batch
        ewall = statistics.median(x["wall"] for x in ev) / args.eval_batch
        cost = tcpu if dev == "cpu" else twall
        ecost = ecpu if dev == "cpu" else ewall
        out[r] = {
            "train_cpu_s_per_query": round(tcpu, 5),
            "train_wall_s_per_query": round(twall, 5),
            "eval_cpu_s_per_query": round(ecpu, 5),
            "eval_wall_s_per_query": round(ewall, 5),
            "train_rounds": [{k: v for k, v in x.items()} for x in tr],
            "eval_rounds": ev,
            "peak_gb": round(max(x["peak"] for x in tr + ev) / 1e9, 3),
            "increase_gb": round(max(x["inc"] for x in tr + ev) / 1e9, 3),
            "edges_per_layer": tr[-1]["edges"],
            "nodes_per_layer": tr[-1]["nodes"],
            "epoch_hours": round(f_train * cost / 3600, 2),
            "test_hours": round(2 * tests * ecost / 3600, 2),
            "test_hours_grouped": (
                round(data["test_groups"] * ecost / 3600, 2) if data.get("test_groups") else None
            ),
        }
    dense = out.get("dense")
    for r, o in out.items():
        if dense is not None and r != "dense":
            key = "train_cpu_s_per_query" if dev == "cpu" else "train_wall_s_per_query"
            o["train_speedup_vs_dense"] = round(dense[key] / o[key], 2)
            ekey = key.replace("train", "eval")
            o["eval_speedup_vs_dense"] = round(dense[ekey] / o[ekey], 2)
    return {
        "graph": args.graph,
        "nodes": graph.num_nodes,
        "edges": graph.num_edges,
        "train_facts": f_train,
        "test_facts": tests,
        "layers": data["layers"],
        "dim": args.dim,
        "batch": args.batch,
        "eval_batch": args.eval_batch,
        "rounds": done,  # the last round may be partial: see each config's train_rounds
        "rounds_asked": args.rounds,
        "warmup": args.warmup,
        "eval_rounds": min(args.eval_rounds, done),
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor(),
        "rss_after_graph_gb": round(rss_data / 1e9, 3),
        "configs": out,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "commit": args.commit,
        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": command_line(__file__, sys.argv[1:]),
    }


def to_markdown(res: dict, dev: str) -> str:
    unit = "CPU s" if dev == "cpu" else "wall s"
    lines = [
        f"# Pruned propagation: speed and memory beside the dense model ({dev})",
        "",
        "- one training step = one_hop query-edge mask, forward, self-adversarial loss (32 "
        "typed negatives), backward, Adam; evaluation = scores of all N candidates, no grad; "
        f"median of interleaved rounds; cost per query in {unit} (process time, all threads)",
        "- epoch h = training facts x train cost per query; test h = 2 x test facts x eval cost "
        "per query (one forward per ranking: an upper bound); grouped test h = the (node, "
        "relation) groups the evaluation scores with one forward each x eval cost per query "
        "(biokg: the synthetic test split's 199,767 groups)",
        "- rounds: training steps timed in every round, the evaluation forward in the first "
        "`eval rounds` (per graph, below the table)",
        "- edges / nodes per layer: per query, each layer (pruned: the packed subgraph; "
        "dense: every kept edge, every node); peak = process RSS (CPU) or CUDA max allocated",
    ]
    lines += [f"- {note}" for note in res.get("notes", [])]  # kept in the JSON across runs
    lines += [
        "",
        f"| graph | config | train {unit}/query | x vs dense | eval {unit}/query | x vs dense "
        "| peak GB (+increase) | edges per layer | epoch h | full test h | grouped test h "
        "| load | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    key = "cpu" if dev == "cpu" else "wall"
    for g, r in res["results"].items():
        for name, o in r["configs"].items():
            lines.append(
                f"| {g} (N {r['nodes']:,}, E {r['edges']:,}, {r['layers']} x {r['dim']}, "
                f"B {r['batch']}) | {name} | {o[f'train_{key}_s_per_query']:.4g} "
                f"| {o.get('train_speedup_vs_dense', '')} | {o[f'eval_{key}_s_per_query']:.4g} "
                f"| {o.get('eval_speedup_vs_dense', '')} | {o['peak_gb']:.2f} "
                f"(+{o['increase_gb']:.2f}) | {', '.join(f'{e:,}' for e in o['edges_per_layer'])} "
                f"| {o['epoch_hours']:,.1f} | {o['test_hours']:,.1f} "
                f"| {'' if o.get('test_hours_grouped') is None else o['test_hours_grouped']} "
                f"| {r['loadavg'][0]:.1f} "
                f"| {r['commit']} |"
            )
    lines += ["", "Commands:", ""] + [f"- `{r['command']}`" for r in res["results"].values()]
    lines += [
        "",
        "Machine: "
        + ", ".join(
            f"{g}: {r['device']}, {r['threads']} threads" for g, r in res["results"].items()
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--graph", choices=["biokg", "hetionet", "wikikg2", "small"], default="small")
    p.add_argument("--ratios", nargs="+", default=["dense", "0.5", "0.2", "0.1", "0.05"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--eval-batch", type=int, default=16)
    p.add_argument("--eval-rounds", type=int, default=3, help="rounds that also time eval")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--hetionet-raw", default="/work/shared/data/hetionet")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--label", default=None, help="the results entry's name (default: --graph)")
    p.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="1: one untimed training forward + backward per config first (builds the graph's "
        "cached indexes, which the first timed round would otherwise pay); 0: none",
    )
    args = p.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    out, stem = Path(args.out), f"pruned_speed_{args.device}"
    path = out / f"{stem}.json"
    res = json.loads(path.read_text()) if path.is_file() else {"results": {}}

    def save(r: dict) -> None:
        res["results"][args.label or args.graph] = r
        save_results(out, stem, res, to_markdown(res, args.device))

    r = run(args, save)
    for name, o in r["configs"].items():
        print(
            f"{args.graph} {name}: train {o['train_cpu_s_per_query']:.4g} CPU s/query "
            f"(x{o.get('train_speedup_vs_dense', 1)}), eval {o['eval_cpu_s_per_query']:.4g}, "
            f"epoch {o['epoch_hours']:,.1f} h, test {o['test_hours']:,.1f} h, "
            f"peak {o['peak_gb']} GB"
        )
    return 0 if all(math.isfinite(o["epoch_hours"]) for o in r["configs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
