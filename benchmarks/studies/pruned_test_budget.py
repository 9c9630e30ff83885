"""Pruned training, wider evaluation: the test-time budget of A*Net's four knobs.

For each preset (``fb237_ind_v1``, ``wn18rr_ind_v1``) and seed, two training runs are made with
the commands of :mod:`pruned_accuracy` (same settings, one torch thread): the dense model and
the pruned one at ``--ratio`` (default 0.1).  The pruned checkpoint (best by valid MRR) is then
evaluated again with ``python -m cmpnn_dist.evaluate ckpt=<run>
model.prune.test_node_ratio=<t>`` for every ``--test-ratios`` value: test Hits@10 against 50
negatives (the paper's rule, pessimistic ties) and full filtered MRR.  The re-evaluation at
the training ratio must reproduce the training run's own final test figures (``same``
column: a check that the evaluation path is the one the table's other columns use).

At test ratio 1 (with degree ratio 1) nothing is selected and the model is the dense one: the
sigmoid gate the pruned model trained with is dropped (the dense limit is exact), so that
column is the pruned-trained weights run densely, not a wider pruned model.

    python -m benchmarks.studies.pruned_test_budget --epochs 2 --seeds 0 1 2

Writes ``benchmarks/results/studies/pruned_test_budget.json`` and ``.md`` (commit, load, commands).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic
from benchmarks.pruned.pruned_accuracy import PAPER_HITS, command, last_json, prune_variant

HERE = Path(__file__).resolve().parent


def _metrics(result: dict) -> dict:
    t = result["test"]
    return {
        "hits@10_50": t["hits@10_50"],
        "mrr": t["mrr"],
        "hits_negatives_rule": t.get("hits_negatives_rule"),
    }


def trained(cmd: list[str], storage: str) -> dict:
    """The run's results: its ``results.json`` when an earlier call of this script in the same
    ``--storage`` finished it (runs are deterministic), else trained now."""
    name = next(a.split("=", 1)[1] for a in cmd if a.startswith("run_name="))
    done = Path(storage) / "runs" / name / "results.json"
    if done.is_file():
        return json.loads(done.read_text())
    return last_json(cmd)[0]


def one_seed(preset: str, seed: int, args: argparse.Namespace) -> dict:
    """Train dense and pruned, then evaluate the pruned checkpoint at every test ratio."""
    dense = trained(command(preset, "dense", seed, args.epochs, args.storage), args.storage)
    pruned = trained(command(preset, args.ratio, seed, args.epochs, args.storage), args.storage)
    evals, cmds = {}, []
    # the training ratio last: each evaluation leaves its rankings in the run folder, and
    # pruned_gap.py / pruned_unvisited.py read the run's own (training ratio) ones
    for t in sorted(args.test_ratios, key=lambda t: t == args.ratio):
        cmd = [sys.executable, "-m", "cmpnn_dist.evaluate", f"ckpt={pruned['run_dir']}",
               f"storage_root={args.storage}", f"model.prune.test_node_ratio={t}"]  # fmt: skip
        evals[t] = _metrics(last_json(cmd)[0])
        cmds.append(shlex.join(cmd[1:]))
    own = _metrics(pruned)
    return {
        "preset": preset,
        "seed": seed,
        "epochs": args.epochs,
        "ratio": args.ratio,
        "variant": prune_variant(),
        "dense": _metrics(dense),
        "pruned_own_test": own,
        "test_ratios": evals,
        "same": evals.get(args.ratio) == own if args.ratio in evals else None,
        "commands": [
            shlex.join(command(preset, r, seed, args.epochs, args.storage)[1:])
            for r in ("dense", args.ratio)
        ]
        + cmds,  # fmt: skip
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "commit": git_commit("--short=12", mark_dirty=True),
        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def to_markdown(rows: list[dict], ratios: list[str]) -> str:
    r0 = rows[0]
    lines = [
        "# Pruned training, wider evaluation (GraIL inductive v1 splits)",
        "",
        f"`{command_line(__file__, sys.argv[1:])}`: trained at "
        f"node_ratio {r0['ratio']} "
        f"({r0['variant']}), {r0['epochs']} epochs (the presets train 20: a **reduced "
        "budget**), the dense model trained the same way in the same script run; the pruned "
        "checkpoint re-evaluated at each test node ratio. Test Hits@10 against 50 negatives "
        f"(eval.hits_negatives_rule={r0['dense']['hits_negatives_rule']}, pessimistic ties) / "
        "full filtered MRR. Test ratio 1 = the "
        "pruned-trained weights run densely (the sigmoid gate dropped: the exact dense limit). "
        f"Commit {r0['commit']}, loads {', '.join(str(r['loadavg'][0]) for r in rows)}.",
        "",
        "| split | seed | dense | "
        + " | ".join(f"test ratio {t}" for t in ratios)
        + " | re-evaluation = training's own test |",
        "|---|---|---|" + "---|" * len(ratios) + "---|",
    ]
    for r in rows:
        cells = [f"{r['test_ratios'][t]['hits@10_50']:.3f} / {r['test_ratios'][t]['mrr']:.3f}"
                 for t in ratios]  # fmt: skip
        d = r["dense"]
        lines.append(f"| {r['preset']} | {r['seed']} | {d['hits@10_50']:.3f} / {d['mrr']:.3f} | "
                     + " | ".join(cells) + f" | {r['same']} |")  # fmt: skip
    by_preset: dict[str, list[dict]] = {}
    for r in rows:
        by_preset.setdefault(r["preset"], []).append(r)
    lines += ["", "Mean over seeds, Hits@10_50 (difference to dense):", "",
              "| split | seeds | paper dense | dense | "
              + " | ".join(f"test ratio {t}" for t in ratios) + " |",
              "|---|---|---|---|" + "---|" * len(ratios)]  # fmt: skip
    for preset, rs in by_preset.items():
        dense = statistics.mean(r["dense"]["hits@10_50"] for r in rs)
        cells = []
        for t in ratios:
            h = statistics.mean(r["test_ratios"][t]["hits@10_50"] for r in rs)
            cells.append(f"{h:.3f} ({h - dense:+.3f})")
        lines.append(f"| {preset} | {len(rs)} | {PAPER_HITS.get(preset, float('nan')):.3f} | "
                     f"{dense:.3f} | " + " | ".join(cells) + " |")  # fmt: skip
    lines += ["", "Commands:", ""] + [f"- `python {c}`" for r in rows for c in r["commands"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--presets", nargs="+", default=["fb237_ind_v1", "wn18rr_ind_v1"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--ratio", default="0.1")
    p.add_argument("--test-ratios", nargs="+", default=["0.1", "0.2", "0.5", "1.0"])
    p.add_argument("--jobs", type=int, default=2, help="seeds trained side by side")
    p.add_argument("--storage", default="/tmp/pruned_test_budget")
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    todo = [(preset, seed) for preset in args.presets for seed in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda ps: one_seed(*ps, args), todo))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "pruned_test_budget.json", json.dumps({"rows": rows}, indent=1))
    text = to_markdown(rows, args.test_ratios)
    write_atomic(out / "pruned_test_budget.md", text)
    print(text)
    return 0 if all(r["same"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
