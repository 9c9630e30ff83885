"""The text of the eight-split table (``paper_inductive.py table``): the basic C-MPNN and
``model.prior=relations`` per split beside the published figures, and, per split, whether the
prior's lift holds and which published models it beats.

A cell row (``paper_inductive.archived``) is ``{"split", "variant" ("basic" / "prior"), "seed",
"run", "cpus", "test": results.json's test metrics, "facts": the same under the paper's filter}``.

The error bar of a split is the sample std of its basic cells' test Hits@10_50 over seeds; a split
with one basic seed takes the pooled std of the splits with several (the root of their mean
variance): on one machine the seed is the largest source of spread these runs have
(``accuracy_commits_fb237_ind_v1.md``).  The prior "holds" on a split when its mean lifts the
basic mean by more than that bar, and "beats" a published model when it is above the model's
figure by more than the bar; "level with" is within the bar either side.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.harness.provenance import git_commit
from cmpnn_dist.paper import PEERS, paper_value, published

HERE = Path(__file__).resolve().parent

ORDER = [f"{d}_ind_v{i}" for d in ("fb237", "wn18rr") for i in range(1, 5)]
METRIC = "hits@10_50"


def _hits(rows: list[dict], split: str, variant: str) -> list[float]:
    return [r["test"][METRIC] for r in rows if r["split"] == split and r["variant"] == variant]


def mean_std(values: list[float], empty: str = "") -> str:
    """``mean +- sample std`` of ``values`` to 3 decimals (one value alone; ``empty`` if none)."""
    if not values:
        return empty
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}"


def error_bars(rows: list[dict]) -> dict[str, tuple[float, str]]:
    """``{split: (bar, where it comes from)}`` for every split with basic cells; see the module
    docstring.  A split with one seed and no split with several has no bar (left out)."""
    spread = {s: statistics.stdev(v) for s in ORDER if len(v := _hits(rows, s, "basic")) > 1}
    pooled = statistics.mean(v * v for v in spread.values()) ** 0.5 if spread else None
    bars = {}
    for split in ORDER:
        if split in spread:
            bars[split] = (spread[split], "the split's seeds")
        elif _hits(rows, split, "basic") and pooled is not None:
            bars[split] = (pooled, f"pooled over {', '.join(spread)}")
    return bars


def prior_verdicts(rows: list[dict]) -> list[dict]:
    """Per split with both variants: the means, the lift and its verdict, and the published
    models (``cmpnn_dist.paper.published``) the prior beats / is level with / is below."""
    bars = error_bars(rows)
    out = []
    for split in ORDER:
        basic, prior = _hits(rows, split, "basic"), _hits(rows, split, "prior")
        if not basic or not prior or split not in bars:
            continue
        bar, source = bars[split]
        b, p = statistics.mean(basic), statistics.mean(prior)
        lift = p - b
        holds = "holds" if lift > bar else "does not hold" if lift < -bar else "within the bar"
        pub = published(split)
        out.append({
            "split": split, "basic": b, "basic_seeds": len(basic), "prior": p,
            "prior_seeds": len(prior), "lift": lift, "bar": bar, "bar_from": source,
            "holds": holds,
            "beats": {m: v for m, v in pub.items() if p - v > bar},
            "level_with": {m: v for m, v in pub.items() if abs(p - v) <= bar},
            "below": {m: v for m, v in pub.items() if v - p > bar},
        })  # fmt: skip
    return out


def who(models: dict[str, float]) -> str:
    """Peers by name; the paper's C-MPNN rows by count and the highest of them."""
    peers = [f"{m} ({v:.3f})" for m, v in models.items() if m in PEERS]
    rows = {m: v for m, v in models.items() if m not in PEERS}
    if rows:
        top = max(rows, key=rows.get)
        many = f"{len(rows)} of the paper's rows" if len(rows) > 1 else "the paper's row"
        peers.append(f"{many} (highest: {top.removeprefix('C-MPNN ')}, {rows[top]:.3f})")
    return "; ".join(peers) or "none"


def _table_rows(rows: list[dict]) -> list[str]:
    lines = []
    for split in ORDER:
        basic = [r for r in rows if r["split"] == split and r["variant"] == "basic"]
        prior = [r for r in rows if r["split"] == split and r["variant"] == "prior"]
        if not basic and not prior:
            continue
        sig = {"data.name": split, "model.aggregate": "sum", "model.message": 1,
               "model.history": "t", "model.init": 2, "model.readout": "none"}  # fmt: skip
        paper = paper_value(sig, "test_hits@10_50")
        lines.append(
            f"| {split} | {', '.join(str(r['seed']) for r in basic)} "
            f"| {mean_std([r['test'][METRIC] for r in basic])} "
            f"| {mean_std([r['facts'][METRIC] for r in basic])} "
            f"| {mean_std([r['test']['mrr'] for r in basic])} "
            f"| {paper[0] if paper else ''} | {PEERS['NBFNet'].get(split, '')} "
            f"| {mean_std([r['test'][METRIC] for r in prior])} "
            f"| {mean_std([r['facts'][METRIC] for r in prior])} |"
        )
    return lines


def _verdict_rows(rows: list[dict]) -> list[str]:
    verdicts = prior_verdicts(rows)
    if not verdicts:
        return ["", "The prior's verdict per split: no split has both variants yet."]
    lines = [
        "",
        "`model.prior=relations` per split (test Hits@10_50, our filter): the lift holds when the "
        "prior's mean is above the basic mean by more than the error bar (the basic seeds' "
        "std; pooled over the splits with several seeds where a split has one), and it beats a "
        "published model when it is above that model's figure by more than the bar:",
        "",
        "| split | basic | + prior | lift | error bar | the lift | beats | level with | below |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        lines.append(
            f"| {v['split']} | {v['basic']:.3f} ({v['basic_seeds']}) | {v['prior']:.3f} "
            f"({v['prior_seeds']}) | {v['lift']:+.3f} | {v['bar']:.3f} ({v['bar_from']}) "
            f"| {v['holds']} | {who(v['beats'])} | {who(v['level_with'])} | {who(v['below'])} |"
        )
    return lines


def to_markdown(rows: list[dict], todo: list[str], load: str) -> str:
    lines = [
        "# The paper's inductive table on the eight GraIL splits (basic C-MPNN, full budget)",
        "",
        "- command: `python -m benchmarks.accuracy.paper_inductive run --storage STORE` (the three "
        "sweeps, in pieces), `save`, then `table`; each cell's files are in "
        "`paper_inductive_runs/<sweep>/<cell>/`",
        "- machine: 2-core VM, no GPU, one trial per core, one torch thread each; a piece "
        "whose `ran on` names a GPU ran on a lent card, every unfinished cell at once "
        f"(`paper_inductive_card.py`, `ops.impl=auto`); load: {load}",
        f"- commit: {git_commit('--short=12', mark_dirty=True)} (this table); each cell ran "
        "from the code of the sweep's checkout at its time; date "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}",
        "- model: the presets' basic C-MPNN (sum, MSG 1, INIT 2, f(t) = t, no readout, "
        "6 x 32), 20 epochs, Adam 5e-3, batch 8, 32 negatives, best epoch by valid MRR; "
        "`+ prior`: the same with `model.prior=relations` (dense)",
        "- metric: test Hits@10 against 50 negatives under the paper's rule "
        "(`eval.hits_negatives_rule=paper`, HxyScotthuang/CMPNN `cmpnn/task.py`); "
        "`our filter`: every known fact of the test graph removed (`eval.filter=all`); "
        "`paper's filter`: only the inductive fact graph's answers removed, the other test "
        "answers count as negatives (`eval.filter=facts`, as that code's "
        "`InductiveKnowledgeGraphCompletion.target`); mean +- sample std over seeds",
        "- the paper: Table 1 (inductive-table-cmpnn), row sum / MSG 1 / f(t) = t, and for the "
        "verdicts every C-MPNN row of its inductive tables (Table 1, the readout and the "
        "initialization tables); NBFNet: Zhu et al., NeurIPS 2021, inductive relation "
        "prediction table (Hits@10 of 50); all typed in `cmpnn_dist/paper.py`",
        "- `ran on`: the CPU or GPU of each piece of the cell "
        "(`paper_inductive_runs/<cell>/pieces.json`)"
        "; float-level differences between CPUs move one 20-epoch cell about as much as a "
        "change of seed does (`accuracy_commits_fb237_ind_v1.md`), so a cell is one draw, and "
        "the seeds' spread is the error bar",
        "",
        "| split | seeds | ours, our filter | ours, paper's filter | test MRR | the paper "
        "| NBFNet (published) | + prior, our filter | + prior, paper's filter |",
        "|---|---|---|---|---|---|---|---|---|",
        *_table_rows(rows),
        *_verdict_rows(rows),
    ]
    head = (
        "| split | variant | seed | hits@10_50 (our / paper's filter) | MRR (our / paper's filter)"
    )
    lines += ["", "Per cell:", "", head + " | ran on | cell |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (ORDER.index(r["split"]), r["variant"], r["seed"])):
        lines.append(
            f"| {r['split']} | {r['variant']} | {r['seed']} | {r['test'][METRIC]:.3f} / "
            f"{r['facts'][METRIC]:.3f} | {r['test']['mrr']:.3f} / {r['facts']['mrr']:.3f} "
            f"| {' + '.join(r['cpus'])} | `{r['run']}` |"
        )
    if todo:
        lines += ["", f"Not finished yet ({len(todo)} cells): " + ", ".join(todo)]
    return "\n".join(lines) + "\n"
