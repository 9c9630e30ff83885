"""The paper's inductive experiment tables as resumable sweeps of the product: the one place that
lists each table's sweeps (name, overrides, splits, seeds), the cells they make, the paper's row
each cell reproduces, and the text of each table (``paper_inductive.py table --table NAME``).

``basic`` is the eight-split table of ``paper_inductive.py`` (Table 1's basic row, ``SWEEPS``,
rendered by ``paper_inductive_table.py``); ``TABLES`` holds the others:

* ``readout`` (table:readout): PNA, MSG 1, f(t) = t, INIT 2 with readout none / global sum /
  relation-specific; seeds 0-2 on the v1 splits, seed 0 on fb237_ind_v2, and fb237_ind_v3 / v4
  at a reduced budget on the CPU (4 of 20 epochs, labelled) beside the paper's budget for a
  lent GPU or days of CPU in pieces;
* ``architecture`` (inductive-table-cmpnn): all twelve rows (sum / PNA x MSG 1 / 2 / 3 x
  f(t) = 0 / t) on the v1 splits, seeds 0-2 for sum, seed 0 for PNA; its sum / MSG 1 / f(t) = t
  row is the basic table's cells and its PNA / MSG 1 / f(t) = t row the readout table's
  ``none`` cells (``shared``), so no cell is trained twice;
* ``init`` (inductive-table-initialization): INIT 0 / 1 / 3 on the v1 splits, seeds 0-2; INIT 2
  is the basic table's row.

A sweep is one ``python -m cmpnn_dist.train -m conf=fb237_ind_v1 ... sweep_name=NAME`` command
(``Sweep.overrides``: its overrides in the command's order, which name its cells), run on the
local Ray cluster one trial per core; stopped, the same command resumes its unfinished cells
from their newest checkpoints and skips the finished ones.  A table's finished cells are
archived (``paper_inductive.py save --table NAME``) in ``results/paper_<name>_runs/<sweep>/
<cell>/`` as the basic table's are, and ``table`` reads that archive (and the shared sweeps'
archives) alone.  Which paper row a cell reproduces comes from its overrides (:func:`conditions`,
checked against the composed config by ``tests/benchmarks/test_paper_tables.py``); a cell with
``train.epochs`` set is a reduced budget, shown as such and never counted as reproduced.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy.paper_inductive_table import mean_std
from benchmarks.harness.archive import folder as unpacked
from benchmarks.harness.provenance import git_commit
from benchmarks.harness.results import results_dir, write_atomic
from cmpnn_dist.paper import ENTRIES

HERE = Path(__file__).resolve().parent

RESULTS = results_dir(__file__)
PRESET = "fb237_ind_v1"  # every sweep composes this preset; `data=` picks the split
EPOCHS = 20  # the paper's budget (conf/train/inductive.yaml)
METRIC = "hits@10_50"
ORDER = [f"{d}_ind_v{i}" for d in ("fb237", "wn18rr") for i in range(1, 5)]

# -- the basic table (paper_inductive.py): the eight splits, Table 1's basic row ---------------
BASIC_ARCHIVE = unpacked(RESULTS / "paper_inductive_runs")  # unpacked from its .tar.gz
# the sweeps' split order: cheapest first (the presets' times in docs/configs.md), so a short
# piece still finishes cells
BY_COST = ["fb237_ind_v1", "wn18rr_ind_v1", "fb237_ind_v2", "wn18rr_ind_v4",
           "fb237_ind_v3", "wn18rr_ind_v2", "fb237_ind_v4", "wn18rr_ind_v3"]  # fmt: skip
# name -> (variant, fixed overrides, splits, seeds)
SWEEPS: dict[str, tuple[str, list[str], list[str], list[int]]] = {
    "graIL8": ("basic", [], BY_COST, [0]),
    "graIL8_seeds": ("basic", [], [s for s in BY_COST if s[-1] in "12"], [1, 2]),
    "graIL8_prior": ("prior", ["model.prior=relations"], BY_COST, [0]),
}


def basic_overrides(name: str, storage: Path, only: list[str] | None = None) -> list[str]:
    """The overrides of basic sweep ``name`` (its axes: ``data`` and ``train.seed``); ``only``:
    its cells on these splits alone (the same cells, named the same)."""
    _, fixed, splits, seeds = SWEEPS[name]
    splits = [s for s in splits if only is None or s in only]
    if only is not None and len(splits) < 2:  # one value is no axis: the cells' names change
        raise ValueError(f"{name}: a sweep on fewer than two splits names its cells otherwise")
    return [
        f"conf={PRESET}", *fixed, "data=" + ",".join(splits),
        "train.seed=" + ",".join(map(str, seeds)), "cluster.cpus_per_worker=1",
        f"sweep_name={name}", f"storage_root={storage}",
    ]  # fmt: skip


# -- the other tables ------------------------------------------------------------------------
@dataclass(frozen=True)
class Sweep:
    """One resumable sweep: ``axes`` are its overrides after ``conf=``, in the command's order
    (fixed and swept alike; the swept ones, in this order, name its cells)."""

    name: str
    axes: tuple[str, ...]

    def overrides(self, storage: Path) -> list[str]:
        return [f"conf={PRESET}", *self.axes, "cluster.cpus_per_worker=1",
                f"sweep_name={self.name}", f"storage_root={storage}"]  # fmt: skip


@dataclass(frozen=True)
class Table:
    name: str
    label: str  # the paper's \label, as cmpnn_dist/paper.py keys its entries
    title: str
    keys: tuple[str, ...]  # the config keys its rows vary (the row's name)
    sweeps: tuple[Sweep, ...]  # run order: cheapest first
    shared: tuple[tuple[str, str], ...] = ()  # (table, sweep) whose cells fill some rows

    @property
    def archive(self) -> Path:
        return unpacked(RESULTS / f"paper_{self.name}_runs")


V1 = "data=fb237_ind_v1,wn18rr_ind_v1"
TABLES: dict[str, Table] = {
    t.name: t
    for t in [
        Table("readout", "table:readout",
              "readout table: PNA, MSG 1, f(t) = t, INIT 2; readout none / global sum / "
              "relation-specific", ("model.readout",), (
                  # the order of the first sweep's command as it was started (its cells' names)
                  Sweep("readout_v1", ("model=pna", "train.seed=0,1,2", V1,
                                       "model.readout=none,sum,relation")),
                  # the readout of the paper's code (the sums / N, W_1, W_2 with a bias)
                  Sweep("readout_code_v1", ("model=pna", "data=fb237_ind_v1,wn18rr_ind_v1",
                                            "model.readout=relation,sum", "train.seed=0",
                                            "model.readout_pool=mean",
                                            "model.readout_bias=true")),
                  Sweep("readout_fb237_v2", ("model=pna", "data=fb237_ind_v2",
                                             "model.readout=none,sum,relation", "train.seed=0")),
                  Sweep("readout_fb237_v34_e4", ("model=pna", "data=fb237_ind_v3,fb237_ind_v4",
                                                 "model.readout=none,sum,relation",
                                                 "train.seed=0", "train.epochs=4")),
                  Sweep("readout_fb237_v34", ("model=pna", "data=fb237_ind_v3,fb237_ind_v4",
                                              "model.readout=none,sum,relation", "train.seed=0")),
              )),
        Table("architecture", "inductive-table-cmpnn",
              "architecture table (Table 1): sum / PNA x MSG 1 / 2 / 3 x f(t) = 0 / t, "
              "INIT 2, no readout", ("model.aggregate", "model.message", "model.history"), (
                  Sweep("arch_sum_msg1", (V1, "model.history=0", "train.seed=0,1,2")),
                  Sweep("arch_pna_msg1", ("model=pna", V1, "model.history=0", "train.seed=0")),
                  Sweep("arch_sum_msg23", (V1, "model.message=2,3", "model.history=0,t",
                                           "train.seed=0,1,2")),
                  Sweep("arch_pna_msg23", ("model=pna", V1, "model.message=2,3",
                                           "model.history=0,t", "train.seed=0")),
              ), (("basic", "graIL8"), ("basic", "graIL8_seeds"), ("readout", "readout_v1"))),
        Table("init", "inductive-table-initialization",
              "initialisation table: sum, MSG 1, f(t) = t, no readout; INIT 0 / 1 / 2 / 3",
              ("model.init",), (Sweep("init_v1", (V1, "model.init=0,1,3", "train.seed=0,1,2")),),
              (("basic", "graIL8"), ("basic", "graIL8_seeds"))),
    ]
}  # fmt: skip


def table_sweep(name: str) -> Sweep | None:
    """The sweep of that name of any table in ``TABLES``."""
    return next((s for t in TABLES.values() for s in t.sweeps if s.name == name), None)


# -- cells and what they reproduce -----------------------------------------------------------
MODEL = {
    "model.family": "cmpnn",
    "model.aggregate": "sum",
    "model.message": "1",
    "model.history": "t",
    "model.init": "2",
    "model.readout": "none",
}  # conf/model/basic
GROUPS = {"basic": {}, "pna": {"model.aggregate": "pna"}}  # conf/model/<group>.yaml's model keys
NOT_CONDITIONS = ("conf", "data", "train.seed", "cluster.cpus_per_worker", "sweep_name",
                  "storage_root")  # fmt: skip


def conditions(overrides: list[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """``(signature, extra)`` of a cell's overrides (fixed and swept): the keys the paper's
    tables are indexed by (``cmpnn_dist.paper.SIGNATURE_KEYS``, values as text) and every
    other override that changes the run (``train.epochs=4``, ``model.prior=relations``)."""
    over = dict(o.split("=", 1) for o in overrides)
    sig = {"data.name": over.get("data", PRESET), **MODEL, **GROUPS[over.get("model", "basic")]}
    extra = []
    for key, value in over.items():
        if key in sig:
            sig[key] = value
        elif key not in NOT_CONDITIONS and key != "model":
            extra.append(f"{key}={value}")
    return sig, tuple(extra)


# variants of a table's model at the paper's budget, shown as rows of their own and not counted
# as reproduced: the readout as the paper's code computes it (cmpnn_dist/model/readout.py)
PAPER_CODE_READOUT = "the paper's, readout as its code (sums / N, bias)"
VARIANTS = {("model.readout_bias=true", "model.readout_pool=mean"): PAPER_CODE_READOUT}


def budget(extra: tuple[str, ...]) -> str | None:
    """``"paper"`` (20 epochs), a reduced budget's or a variant's label, or None: not the
    table's model."""
    if not extra:
        return "paper"
    if len(extra) == 1 and extra[0].startswith("train.epochs="):
        return f"reduced: {extra[0].split('=')[1]} of {EPOCHS} epochs"
    return VARIANTS.get(tuple(sorted(e.lower() for e in extra)))  # the sweep writes True


def paper_rows(label: str) -> list[tuple[dict[str, str], dict[str, float]]]:
    """The paper's rows of table ``label``: ``(conditions without the split, {split: value})``."""
    rows: dict[tuple, tuple[dict[str, str], dict[str, float]]] = {}
    for table, cond, metric, value in ENTRIES:
        if table == label and metric == "test_" + METRIC:
            key = {k: str(v) for k, v in cond.items() if k != "data.name"}
            rows.setdefault(tuple(key.items()), (key, {}))[1][cond["data.name"]] = value
    return list(rows.values())


def row_of(table: Table, sig: dict[str, str]) -> dict[str, str] | None:
    """The paper's row of ``table`` a cell of signature ``sig`` reproduces (None: none)."""
    for cond, _ in paper_rows(table.label):
        if all(sig.get(k, MODEL.get(k)) == v for k, v in cond.items()):
            return cond
    return None


def sources(table: Table, own: bool = False) -> list[tuple[str, Path, list[str]]]:
    """``(sweep, archive, overrides)`` of the sweeps whose cells fill ``table``: its own, then
    (unless ``own``) the shared ones."""
    out = [(s.name, table.archive, s.overrides(Path("STORE"))) for s in table.sweeps]
    for other, name in () if own else table.shared:
        if other == "basic":
            out.append((name, BASIC_ARCHIVE, basic_overrides(name, Path("STORE"))))
        else:
            sweep = next(s for s in TABLES[other].sweeps if s.name == name)
            out.append((name, TABLES[other].archive, sweep.overrides(Path("STORE"))))
    return out


def cells(table: Table, own: bool = False) -> list[dict]:
    """Every cell of the table's sweeps (and, unless ``own``, of the shared ones) that
    reproduces one of its rows: run name (``<sweep>/<cell id>``), archive, overrides, split,
    seed, signature, budget."""
    from cmpnn_dist.runs.sweep import expand

    out = []
    for name, archive, overrides in sources(table, own):
        fixed, grid = expand(overrides)
        for cell in grid:
            over = [*fixed, *cell.overrides]
            sig, extra = conditions(over)
            if budget(extra) is None or row_of(table, sig) is None:
                continue  # another model (the basic sweeps' prior)
            seed = dict(o.split("=", 1) for o in over).get("train.seed", "0")
            out.append({"run": f"{name}/{cell.cell_id}", "archive": archive, "overrides": over,
                        "split": sig["data.name"], "seed": int(seed), "signature": sig,
                        "budget": budget(extra)})  # fmt: skip
    return out


def run_names(table: Table) -> list[str]:
    """The table's own cells (what its ``run`` trains and its ``save`` archives)."""
    return [c["run"] for c in cells(table, own=True)]


# -- the table from the archives -------------------------------------------------------------
def archived(table: Table, step_of) -> tuple[list[dict], list[str]]:
    """Finished cells (``cells`` with ``test``, ``facts``, ``cpus``) and the unfinished cells'
    names (with the archived step of one in progress); ``step_of(folder)``: that step."""
    done, todo = [], []
    for c in cells(table):
        folder = c["archive"] / c["run"]
        where = c["archive"].name
        if not (folder / "facts.json").is_file():
            step = step_of(folder) if folder.is_dir() else -1
            todo.append(f"{where}/{c['run']}" + (f" (step {step})" if step >= 0 else ""))
            continue
        res = json.loads((folder / "results.json").read_text())
        pieces = json.loads((folder / "pieces.json").read_text()) if (
            folder / "pieces.json").is_file() else []  # fmt: skip
        facts = json.loads((folder / "facts.json").read_text())
        done.append({**{k: v for k, v in c.items() if k != "archive"}, "archive": where,
                     "cpus": sorted({p.get("device", p["cpu"]) for p in pieces}),
                     "test": res["test"], "facts": facts})  # fmt: skip
    return done, todo


NOT_RUN = "not run"


def _budget(b: str) -> str:
    return "the paper's" if b == "paper" else b


def _name(table: Table, cond: dict[str, str]) -> str:
    words = {"model.message": "MSG {}", "model.history": "f(t) = {}", "model.init": "INIT {}"}
    return " / ".join(words.get(k, "{}").format(cond[k]) for k in table.keys)


def summary(table: Table, done: list[dict]) -> dict:
    """Per paper row, planned split and budget: the paper's value and ours (mean +- std over
    the seeds named); and how many of the paper's cells are reproduced at its budget."""
    planned = cells(table)
    splits = [s for s in ORDER if any(c["split"] == s for c in planned)]
    rows, reproduced, planned_cells = [], 0, 0
    for cond, values in paper_rows(table.label):
        for split in splits:
            mine = [
                c for c in planned if c["split"] == split and row_of(table, c["signature"]) == cond
            ]
            planned_cells += bool(mine)
            for b in dict.fromkeys(c["budget"] for c in mine):
                got = sorted((r for r in done if r["split"] == split and r["budget"] == b
                              and row_of(table, r["signature"]) == cond),
                             key=lambda r: r["seed"])  # fmt: skip
                reproduced += b == "paper" and bool(got)
                rows.append({
                    "row": _name(table, cond), "conditions": cond, "split": split, "budget": b,
                    "paper": values.get(split), "seeds": [r["seed"] for r in got],
                    "planned_seeds": sorted({c["seed"] for c in mine if c["budget"] == b}),
                    "ours": [r["test"][METRIC] for r in got],
                    "ours_paper_filter": [r["facts"][METRIC] for r in got],
                    "rule": sorted({r["test"].get("hits_negatives_rule", "?") for r in got}),
                    "cells": [f"{r['archive']}/{r['run']}" for r in got],
                })  # fmt: skip
    total = sum(len(v) for _, v in paper_rows(table.label))
    return {"rows": rows, "splits": splits, "reproduced": reproduced, "paper_cells": total,
            "planned_cells": planned_cells}  # fmt: skip


def to_markdown(table: Table, done: list[dict], todo: list[str], load: str) -> str:
    s = summary(table, done)
    lines = [
        f"# The paper's {table.title} ({table.label})",
        "",
        f"- command: `python -m benchmarks.accuracy.paper_inductive run --table {table.name} "
        "--storage "
        f"STORE` (its sweeps, in pieces; `--print` prints them), `save --table {table.name} "
        f"--storage STORE`, then `table --table {table.name}`; each cell's files are in "
        f"`{table.archive.name}/<sweep>/<cell>/`"
        + (", the shared rows' in their own tables' folders" if table.shared else ""),
        "- machine: 2-core VM, no GPU, one trial per core, one torch thread each; a piece "
        "whose `ran on` names a GPU ran on a lent card; load: " + load,
        f"- commit: {git_commit('--short=12', mark_dirty=True)} (this table); each cell ran "
        "from the code of the sweep's checkout at its time; date "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}",
        "- model: the presets' C-MPNN (6 x 32, Adam 5e-3, batch 8, 32 negatives, best epoch by "
        f"valid MRR), {EPOCHS} epochs (the paper's budget) unless the row's budget is reduced",
        "- the rule: test Hits@10 against 50 negatives under the paper's rule "
        "(`eval.hits_negatives_rule=paper`, HxyScotthuang/CMPNN `cmpnn/task.py`; the `rule` "
        "column is what each cell's results.json names); `ours`: our filter "
        "(`eval.filter=all`); `paper's filter`: `eval.filter=facts`; mean +- sample std over "
        "the seeds named (the paper averages five runs); `not run`: no finished cell yet",
        f"- the paper: {table.label}, typed in `cmpnn_dist/paper.py`",
        f"- reproduced at the paper's budget: {s['reproduced']} of the {s['planned_cells']} "
        f"cells planned here, of the {s['paper_cells']} of the paper's table (the others have "
        "no sweep here)",
        "",
        "| row | split | the paper | ours | ours, paper's filter | seeds | budget | rule |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in s["rows"]:
        seeds = ", ".join(map(str, r["seeds"]))
        if r["seeds"] != r["planned_seeds"]:
            seeds += f" (planned {', '.join(map(str, r['planned_seeds']))})"
        lines.append(
            f"| {r['row']} | {r['split']} | {r['paper']:.3f} | {mean_std(r['ours'], NOT_RUN)} "
            f"| {mean_std(r['ours_paper_filter'], NOT_RUN)} | {seeds.strip()} "
            f"| {_budget(r['budget'])} "
            f"| {', '.join(r['rule']) or '-'} |"
        )
    lines += ["", "Per cell:", "",
              "| row | split | seed | budget | hits@10_50 (our / paper's filter) | MRR | ran on "
              "| cell |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in sorted(done, key=lambda r: (ORDER.index(r["split"]), r["run"])):
        lines.append(
            f"| {_name(table, row_of(table, r['signature']))} | {r['split']} | {r['seed']} "
            f"| {_budget(r['budget'])} | {r['test'][METRIC]:.3f} / {r['facts'][METRIC]:.3f} "
            f"| {r['test']['mrr']:.3f} | {' + '.join(r['cpus'])} | `{r['archive']}/{r['run']}` |"
        )
    if not done:
        lines.append("| (no finished cell yet) | | | | | | | |")
    if todo:
        lines += ["", f"Not finished yet ({len(todo)} cells), by sweep:", ""]
        for sweep in dict.fromkeys(n.rsplit("/", 1)[0] for n in todo):
            mine = [n.rsplit("/", 1)[1] for n in todo if n.rsplit("/", 1)[0] == sweep]
            lines.append(f"- `{sweep}/`: " + ", ".join(f"`{n}`" for n in mine))
    return "\n".join(lines) + "\n"


def write(table: Table, out: Path, load: str, step_of) -> str:
    """``paper_<name>_cpu.{md,json}`` of ``table`` from the archives alone."""
    done, todo = archived(table, step_of)
    doc = {"table": table.name, "label": table.label, **summary(table, done), "cells": done,
           "todo": todo}  # fmt: skip
    write_atomic(out / f"paper_{table.name}_cpu.json", json.dumps(doc, indent=1))
    text = to_markdown(table, done, todo, load)
    write_atomic(out / f"paper_{table.name}_cpu.md", text)
    return text
