"""Accuracy of pruned propagation beside the dense model on the GraIL inductive splits.

For each preset (``fb237_ind_v1``, ``wn18rr_ind_v1``: the paper's basic C-MPNN and inductive
hyperparameters) and each node ratio (``dense`` = ``model.propagation=dense``), one training
run ``python -m cmpnn_dist.train conf=<preset> model.propagation=pruned
model.prune.node_ratio=<r> ...`` is made, one after the other (one torch thread each), and its
final JSON line read: test Hits@10 against 50 negatives (under the ``eval.hits_negatives_rule``
each run recorded, named per row) and the filtered full-rank MRR, with the paper's dense value
beside.  ``--epochs`` cuts the preset's 20 epochs
(a *reduced budget*, labelled as such in the table); ``--seeds`` adds seeds.

    python -m benchmarks.pruned.pruned_accuracy --epochs 2 --ratios dense 0.5 0.2 0.1 0.05
    python -m benchmarks.pruned.pruned_accuracy --collect          # rewrite the table only

Each run starts afresh (an older folder of its name is moved aside) unless ``--resume``: then a
run the storage holds continues from its last checkpoint (the trainer's exact resume, the same
result as one uninterrupted run), so a batch of 20-epoch runs can stop with a session and go on
in the next; a run that finished and is in the table already is skipped.  Resume a batch only
with the code it started with: the entry's commit is the code of its last piece
(``resumed_from_step`` says where that piece began).

Results accumulate in ``benchmarks/results/pruned/pruned_accuracy.json`` (one entry per run) and
``pruned_accuracy.md``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import NamedTuple, get_args

from benchmarks.harness import archive
from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import child_command, git_commit
from benchmarks.harness.results import results_dir, write_atomic
from cmpnn_dist.config import (
    SAVED_CHOICE_NAMES,
    PruneConfig,
    PruneGate,
    PrunePriority,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

PAPER_HITS = {"fb237_ind_v1": 0.794, "wn18rr_ind_v1": 0.932}  # paper Table 2, basic C-MPNN
FULL_EPOCHS = 20
UNVISITED_TAG = {"constant": "", "relations": "-rel"}  # run names; variant labels add the kind
RANKS_DIR = "pruned_accuracy_ranks"  # beside the table: each kept run's test ranks


def run_name(
    preset: str,
    ratio: str,
    seed: int,
    epochs: int,
    unvisited: str,
    prior: str,
    priority: str | None = None,
    gate: str | None = None,
) -> str:
    """The run's folder name under ``<storage>/runs/`` (and its ranks' file name); a priority
    or gate other than the config's default is part of it."""
    kind = "" if ratio == "dense" else UNVISITED_TAG[unvisited]
    if ratio != "dense":
        kind += "".join(f"-{x}" for x in (priority, gate) if x)
    return f"pruned-{preset}-{ratio}{kind}{'' if prior == 'none' else '-prior'}-s{seed}-e{epochs}"


def keep_ranks(entry: dict, storage: str, out: Path) -> None:
    """Copy the run's per-query test ranks (rank and candidate count per query) to
    ``<out>/pruned_accuracy_ranks/<run name>.parquet``, so any Hits@10_50 rule can score the
    row again, and name the file in the entry."""
    src = Path(storage) / "runs" / entry["run_name"] / "ranks_test_all.parquet"
    dst = out / RANKS_DIR / f"{entry['run_name']}.parquet"
    write_atomic(dst, src.read_bytes())
    entry["ranks"] = f"{RANKS_DIR}/{dst.name}"
    archive.pack(dst.parent)  # the archive git keeps: pruned_accuracy_ranks.tar.gz


def command(
    preset: str,
    ratio: str,
    seed: int,
    epochs: int,
    storage: str,
    unvisited: str = "constant",
    prior: str = "none",
    resume: bool = False,
    overrides: tuple[str, ...] = (),
    priority: str | None = None,
    gate: str | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "cmpnn_dist.train",
        f"conf={preset}",
        f"train.seed={seed}",
        f"train.epochs={epochs}",
        "train.progress=false",
        "train.num_threads=1",
        f"storage_root={storage}",
        f"data_root={Path('/work/shared/data') if Path('/work/shared/data').is_dir() else ''}",
        f"run_name={run_name(preset, ratio, seed, epochs, unvisited, prior, priority, gate)}",
        f"resume={str(resume).lower()}",
    ]
    if ratio != "dense":
        cmd += ["model.propagation=pruned", f"model.prune.node_ratio={ratio}"]
        if unvisited != "constant":
            cmd.append(f"model.prune.unvisited={unvisited}")
        cmd += [f"model.prune.{k}={v}" for k, v in (("priority", priority), ("gate", gate)) if v]
    if prior != "none":
        cmd.append(f"model.prior={prior}")
    return cmd + list(overrides)


def prune_variant(
    unvisited: str = "constant", priority: str | None = None, gate: str | None = None
) -> str:
    """``"<priority>, <gate>"``: the runs' ``model.prune`` priority and gate (None: the config's
    defaults), and ``", relations"`` where unvisited candidates score by their relations."""
    p = PruneConfig()
    kind = "" if unvisited == "constant" else f", {unvisited}"
    return f"{priority or p.priority}, {gate or p.gate}{kind}"


def variant_of(entry: dict) -> str | None:
    """The entry's ``(priority, gate)`` label (None for dense)."""
    return None if entry["ratio"] == "dense" else entry["variant"]


def last_json(cmd: list[str]) -> tuple[dict, float]:
    """Run ``cmd`` (train / evaluate) in the checkout: its last stdout line, parsed, and the
    CPU seconds of that process and its children (its own rusage: runs may overlap)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{child_command(cmd)} failed:\n{err.read()[-3000:]}")
        return json.loads(out.read().strip().splitlines()[-1]), usage.ru_utime + usage.ru_stime


def rule_of(entry: dict) -> str:
    """The ``eval.hits_negatives_rule`` of the entry's Hits@10_50, in today's names
    (``cmpnn_dist.config.SAVED_CHOICE_NAMES``: ``torchdrug`` is ``nbfnet_pyg``); an entry
    that names none was run by code that computed ``n_negatives`` only."""
    recorded = entry["test"].get("hits_negatives_rule") or "n_negatives"
    return SAVED_CHOICE_NAMES["eval.hits_negatives_rule"].get(recorded, recorded)


def label_of(entry: dict) -> str:
    """``dense`` or ``<ratio> (<priority>, <gate>[, relations])``, then `` + prior`` for runs
    with ``model.prior=relations``."""
    base = "dense" if entry["ratio"] == "dense" else f"{entry['ratio']} ({variant_of(entry)})"
    return base + ("" if entry.get("prior", "none") == "none" else " + prior")


def key_of(entry: dict) -> tuple:
    """What makes two runs the same cell (a rerun replaces the older entry)."""
    return (
        entry["preset"],
        entry["ratio"],
        entry["seed"],
        entry["epochs"],
        variant_of(entry),
        entry.get("prior", "none"),
    )


class Cell(NamedTuple):
    """One training run: :func:`command`'s arguments."""

    preset: str
    ratio: str
    seed: int
    epochs: int
    storage: str
    unvisited: str = "constant"
    prior: str = "none"
    resume: bool = False  # continue the run's folder from its last checkpoint
    overrides: tuple[str, ...] = ()  # more config overrides (not in the run's name)
    priority: str | None = None  # model.prune.priority (None: the config's default)
    gate: str | None = None  # model.prune.gate (None: the config's default)

    @property
    def run_name(self) -> str:
        return run_name(*self[:4], self.unvisited, self.prior, self.priority, self.gate)


def done_before(cell: Cell, recorded: set[str | None]) -> bool:
    """Whether the cell's run finished in its storage and its row is among ``recorded``."""
    done = Path(cell.storage) / "runs" / cell.run_name / "results.json"
    return cell.run_name in recorded and done.is_file()


def run_one(cell: Cell) -> dict:
    cmd = command(*cell)
    t0 = time.perf_counter()
    last, cpu = last_json(cmd)
    return {
        "preset": cell.preset,
        "ratio": cell.ratio,
        "seed": cell.seed,
        "epochs": cell.epochs,
        "test": last["test"],
        "valid": last["valid"],
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(cpu, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "commit": git_commit("--short=12", mark_dirty=True),
        "variant": None
        if cell.ratio == "dense"
        else prune_variant(cell.unvisited, cell.priority, cell.gate),
        "prior": cell.prior,
        "resumed_from_step": last.get("resumed_from_step"),  # wall / CPU s: this piece only
        "command": shlex.join(cmd[1:]),  # the markdown adds `python`
        "run_name": cell.run_name,
        "when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def record(out: Path, entry: dict | None = None) -> list[dict]:
    """Add ``entry`` (if any) to ``<out>/pruned_accuracy.json``, replacing the same cell's older
    entry, and rewrite the table; read and written under a lock, so two batches running side by
    side keep each other's entries.  Returns every entry."""
    path = out / "pruned_accuracy.json"
    lock = os.open(out, os.O_RDONLY)  # the folder itself: the files are replaced, not edited
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = json.loads(path.read_text()) if path.is_file() else []
        if entry is not None:
            entries = [x for x in entries if key_of(x) != key_of(entry)] + [entry]
            write_atomic(path, json.dumps(entries, indent=1))
        write_atomic(out / "pruned_accuracy.md", to_markdown(entries))
    finally:
        os.close(lock)  # and with it the lock
    return entries


def to_markdown(entries: list[dict]) -> str:
    lines = [
        "# Pruned propagation: accuracy beside the dense model (GraIL inductive v1 splits)",
        "",
        "- model: the presets' basic C-MPNN (sum, MSG 1, INIT 2, 6 x 32, decoder 64), Adam "
        "5e-3, batch 8, 32 negatives; pruned = `model.propagation=pruned "
        "model.prune.node_ratio=<r>` (degree_ratio 1, test ratio = train ratio) with its "
        "`model.prune` priority and gate shown as `(priority, gate)`: `(decoder, sigmoid)` = "
        "A*Net's (the priority is the decoder's logit, sigmoid(priority) gates the sent "
        "state; the config's default), `(mlp, straight_through)` = a separate priority MLP "
        "and a straight-through gate (`--priority mlp --gate straight_through`); "
        "`, relations`: "
        "`model.prune.unvisited=relations` (unvisited candidates score by a learned two-hop "
        "summary of their relations, `cmpnn_dist/model/relation_prior.py`; without it they all "
        "tie at one constant); ` + prior`: `model.prior=relations` (every candidate's logit, "
        "dense or pruned, plus the same kind of learned relation summary; its dense runs are "
        "the reference of its pruned ones); best epoch by valid MRR",
        f"- **reduced budget** where `epochs` < {FULL_EPOCHS} (the preset's full budget); "
        "the full-budget command is the same with the `train.epochs` override removed",
        "- metric: test Hits@10 against 50 negatives under the `rule` of each row "
        "(`eval.hits_negatives_rule`: `paper` = the paper's code, HxyScotthuang/CMPNN "
        "`cmpnn/task.py`, C(50, i) with the target among the samples; `nbfnet_pyg` = "
        "NBFNet-PyG's `script/run.py`, C(49, i), recorded by the runs as `torchdrug`; "
        "`n_negatives` = C(50, i) over the negatives, the runs that recorded no rule); a row "
        f"whose run kept its per-query test ranks (`{RANKS_DIR}/<run name>.parquet`, named "
        "in `pruned_accuracy.json`) can be scored again under any rule; the rows whose runs "
        "kept none stay under the rule they ran with; full filtered rank MRR; "
        "ties pessimistic (unvisited candidates share one score and rank below their ties)",
        "- `diff vs dense`: against the dense run of the same split, epochs, seed, prior and "
        "rule in this file (see the commit column); "
        "`benchmarks/results/studies/pruned_gap.md` splits "
        "the gap by answers within / beyond the heads' 6-hop horizon",
        "- machine: 2 CPU cores shared with other jobs, one torch thread per run, runs one "
        "after the other or (`--jobs 2`) two side by side; `cpu s` = the run's process CPU "
        "seconds (training + evaluation)",
        "",
        "| split | propagation | epochs | seed | rule | test hits@10_50 | diff vs dense "
        "| test MRR | paper dense hits@10_50 | cpu s | load | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    dense = {
        (e["preset"], e["epochs"], e["seed"], e.get("prior", "none"), rule_of(e)): e["test"][
            "hits@10_50"
        ]
        for e in entries
        if e["ratio"] == "dense"
    }
    for e in sorted(
        entries,
        key=lambda e: (
            e["preset"],
            e["epochs"],
            e["ratio"] != "dense",
            -float(e["ratio"]) if e["ratio"] != "dense" else 0,
            e["seed"],
        ),
    ):
        h = e["test"]["hits@10_50"]
        ref = dense.get((e["preset"], e["epochs"], e["seed"], e.get("prior", "none"), rule_of(e)))
        diff = "" if ref is None or e["ratio"] == "dense" else f"{h - ref:+.3f}"
        prop = label_of(e) if e["ratio"] == "dense" else f"pruned {label_of(e)}"
        lines.append(
            f"| {e['preset']} | {prop} | {e['epochs']} | {e['seed']} | {rule_of(e)} "
            f"| {h:.3f} | {diff} "
            f"| {e['test']['mrr']:.3f} | {PAPER_HITS.get(e['preset'], float('nan')):.3f} "
            f"| {e['cpu_s']:.0f} | {e['loadavg'][0]:.1f} | {e['commit']} |"
        )
    groups: dict[tuple, list[dict]] = {}
    for e in entries:
        groups.setdefault((e["preset"], e["epochs"], label_of(e), rule_of(e)), []).append(e)
    multi = {k: v for k, v in groups.items() if len(v) > 1}
    if multi:
        lines += [
            "",
            "Seeds pooled (mean +- sample std over seeds):",
            "",
            "| split | propagation | epochs | seeds | rule | test hits@10_50 | test MRR |",
            "|---|---|---|---|---|---|---|",
        ]
        for (preset, epochs, ratio, rule), v in sorted(multi.items()):
            v = sorted(v, key=lambda e: e["seed"])
            h = [e["test"]["hits@10_50"] for e in v]
            m = [e["test"]["mrr"] for e in v]
            lines.append(
                f"| {preset} | {ratio} | {epochs} | {', '.join(str(e['seed']) for e in v)} "
                f"| {rule} | {statistics.mean(h):.3f} +- {statistics.stdev(h):.3f} "
                f"| {statistics.mean(m):.3f} +- {statistics.stdev(m):.3f} |"
            )
    lines += ["", "Commands (one per run):", ""]
    lines += [f"- `python {e['command']}`" for e in entries]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--presets", nargs="+", default=["fb237_ind_v1", "wn18rr_ind_v1"])
    p.add_argument("--ratios", nargs="+", default=["dense", "0.5", "0.2", "0.1", "0.05"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--epochs", type=int, default=FULL_EPOCHS)
    p.add_argument(
        "--unvisited",
        choices=list(UNVISITED_TAG),
        default="constant",
        help="model.prune.unvisited of the pruned runs",
    )
    p.add_argument(
        "--prior",
        choices=["none", "relations"],
        default="none",
        help="model.prior of every run (dense and pruned)",
    )
    p.add_argument(
        "--priority",
        choices=get_args(PrunePriority),
        help="model.prune.priority of the pruned runs (default: the config's)",
    )
    p.add_argument(
        "--gate",
        choices=get_args(PruneGate),
        help="model.prune.gate of the pruned runs (default: the config's)",
    )
    p.add_argument("--storage", default="/tmp/pruned_accuracy")
    p.add_argument("--collect", action="store_true", help="only rewrite the table")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side (one thread each)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue each run the storage holds from its last checkpoint (same code only)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more config override for every run (not in the run's name or the table's key)",
    )
    p.add_argument("--out", default=str(results_dir(__file__)))
    args = p.parse_args(argv)
    out = Path(args.out)
    archive.folder(out / RANKS_DIR)  # the kept ranks, unpacked from their .tar.gz
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pruned_accuracy.json"
    if not args.collect:
        cells = [
            Cell(
                preset,
                ratio,
                seed,
                args.epochs,
                args.storage,
                args.unvisited,
                args.prior,
                args.resume,
                tuple(args.override),
                args.priority,
                args.gate,
            )
            for preset in args.presets
            for seed in args.seeds
            for ratio in args.ratios
        ]
        if args.resume:  # a finished run whose row is in the table: nothing left to do
            entries = json.loads(path.read_text()) if path.is_file() else []
            recorded = {e.get("run_name") for e in entries}
            cells = [c for c in cells if not done_before(c, recorded)]
        with ThreadPoolExecutor(args.jobs) as pool:  # results written as each run ends
            for done in as_completed([pool.submit(run_one, c) for c in cells]):
                e = done.result()
                keep_ranks(e, args.storage, out)
                record(out, e)
                print(
                    f"{e['preset']} {e['ratio']} s{e['seed']}: hits@10_50 "
                    f"{e['test']['hits@10_50']:.3f} mrr {e['test']['mrr']:.3f} "
                    f"({e['cpu_s']:.0f} CPU s)",
                    flush=True,
                )
    record(out)  # the table from the file, as every batch beside this one left it
    return 0


if __name__ == "__main__":
    sys.exit(main())
