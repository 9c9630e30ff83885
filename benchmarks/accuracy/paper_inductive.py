"""The paper's inductive table (Table 1, basic C-MPNN) on all eight GraIL splits, from the
product's own resumable sweeps, with the paper's and NBFNet's published figures beside ours.

Three sweeps of ``python -m cmpnn_dist.train -m`` on the local Ray cluster (one trial per core,
one torch thread each): ``graIL8`` (seed 0 on every split, cheapest split first), ``graIL8_seeds``
(seeds 1 and 2 on v1 and v2) and ``graIL8_prior`` (``graIL8`` with ``model.prior=relations``).
On one core they take about 15 hours a seed, so they run in pieces, and the pieces may run on
different machines: the cells travel in git, in
``benchmarks/results/accuracy/paper_inductive_runs/``.

    python -m benchmarks.accuracy.paper_inductive run --storage STORE   # restore, then the sweeps
    python -m benchmarks.accuracy.paper_inductive save --storage STORE  # any time; then commit
    python -m benchmarks.accuracy.paper_inductive table                 # the table, from the cells

``--table readout`` / ``architecture`` / ``init`` does the same for the paper's other
inductive tables (``paper_tables.py`` lists their sweeps): ``run`` restores that table's
archive and runs its sweeps in turn (``--print``: their commands), ``save`` archives its cells
into ``results/paper_<name>_runs/``, ``table`` writes ``results/paper_<name>_cpu.{md,json}``.

``run`` first restores the archive into ``STORE`` (a cell the store lacks, or holds at an
earlier step), then runs the three sweeps in stages (``STAGES``: every sweep's cells on the two
cheapest splits, then on the next two, the next two and the last two), so the seeds and the
prior's cells on the cheap splits do not wait for the dearest splits; a stopped sweep resumes
its unfinished cells from their newest checkpoint, never from step 0, and skips the finished
ones (``run --print`` prints the commands); a sweep whose cells failed does not hold up the
later ones, and ``run`` then exits 1 naming it.  Ctrl-C or ``kill`` of ``run`` is passed on to
the running sweep (:func:`run_passing_signals`): its cells checkpoint their current step, no
later sweep starts, and ``run`` exits 130 / 143. ``save`` copies into the archive, for each finished
cell, its ``results.json`` and the validation rows of its ``metrics.csv`` plus its best weights'
test metrics under the paper's filter (``eval.filter=facts``, scored once, in this process) and
the per-query test ranks under both filters (any Hits@10_50 rule scores them again); for each
unfinished cell, its newest valid checkpoint (model, optimizer, sampler, RNG and the best
weights so far), so the next ``run`` continues it; then it writes the table. ``table`` writes
``benchmarks/results/paper_inductive_cpu.{md,json}`` from the archive alone (unfinished cells
are listed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.accuracy.paper_inductive_table import prior_verdicts, to_markdown
from benchmarks.accuracy.paper_tables import (
    BASIC_ARCHIVE,
    BY_COST,
    SWEEPS,
    TABLES,
    basic_overrides,
    table_sweep,
)
from benchmarks.harness.archive import pack
from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import child_command, cpu_model, git_commit
from benchmarks.harness.results import results_dir, write_atomic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

ARCHIVE = BASIC_ARCHIVE


# ``run``'s order: each stage runs every sweep's cells on its splits, so the seeds and the
# prior's cells on the cheap splits finish before the dearest splits' cells start
STAGES = [BY_COST[:2], BY_COST[:4], BY_COST[:6], BY_COST]


def sweep_overrides(name: str, storage: Path, only: list[str] | None = None) -> list[str]:
    """The overrides of sweep ``name``: a basic one (``SWEEPS``, on the splits ``only``) or a
    sweep of one of the other tables (``paper_tables.TABLES``)."""
    if name in SWEEPS:
        return basic_overrides(name, storage, only)
    sweep = table_sweep(name)
    if sweep is None or only is not None:
        raise ValueError(f"{name}: no such sweep (or it runs whole)")
    return sweep.overrides(storage)


def sweep_command(name: str, storage: Path, only: list[str] | None = None) -> list[str]:
    """The product's command line for sweep ``name`` (on the splits ``only``)."""
    over = sweep_overrides(name, storage, only)
    return [sys.executable, "-m", "cmpnn_dist.train", "-m", *over]


def run_passing_signals(cmd: list[str]) -> int:
    """Run ``cmd`` in its own process group and pass each SIGINT / SIGTERM this process gets
    on to it, once; return its exit status.  So a Ctrl-C of ``run`` reaches the sweep once,
    which checkpoints its running cells and exits 130 (``subprocess.run`` would kill the sweep
    0.25 s after a KeyboardInterrupt, losing every step since the cells' last checkpoints), and
    a second Ctrl-C reaches it as a second one."""
    child = subprocess.Popen(cmd, start_new_session=True)

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def plan() -> list[tuple[str, list[str]]]:
    """``(sweep, splits)`` in ``run``'s order: the stages, each sweep within a stage."""
    steps = []
    for stage in STAGES:
        for name, (_, _, splits, _) in SWEEPS.items():
            mine = [s for s in splits if s in stage]
            if mine:
                steps.append((name, mine))
    return steps


def cells() -> Iterator[tuple[str, str, str, int]]:
    """``(run name, variant, split, seed)`` of every cell, in run order; the run name is the
    product's ``<sweep>/<cell id>`` (``cmpnn_dist.runs.sweep.expand`` names the cells)."""
    from cmpnn_dist.runs.sweep import expand

    for name, (variant, _, _, seeds) in SWEEPS.items():
        _, grid = expand(sweep_overrides(name, Path("STORE")))
        for cell in grid:
            over = dict(o.split("=", 1) for o in cell.overrides)
            yield (
                f"{name}/{cell.cell_id}",
                variant,
                over["data"],
                int(over.get("train.seed", seeds[0])),
            )


def run_names() -> list[str]:
    return [c[0] for c in cells()]


def _copy_tree(src: Path, dst: Path) -> None:
    """Replace ``dst`` by a copy of ``src`` (staged beside it, then renamed)."""
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)


def _step(run: Path) -> int:
    """The newest valid checkpoint's step of a run folder (-1: none)."""
    from cmpnn_dist.runs.checkpoint_store import CheckpointStore

    found = CheckpointStore(run).find_latest() if (run / "checkpoints").is_dir() else None
    return found.step if found else -1


def restore(storage: Path, archive: Path = ARCHIVE, runs: list[str] | None = None) -> list[str]:
    """Copy archived runs into ``storage`` where the store has none, or an older one."""
    restored = []
    for name in runs or run_names():
        src, dst = archive / name, storage / "runs" / name
        if not src.is_dir() or (dst / "results.json").is_file():
            continue
        if (src / "results.json").is_file() or _step(src) > _step(dst):
            dst.parent.mkdir(parents=True, exist_ok=True)
            _copy_tree(src, dst)
            restored.append(name)
    return restored


def _copy_checkpoint(run: Path, dst: Path, tries: int = 5) -> int:
    """Copy a run's newest valid checkpoint into ``dst``; returns its step (-1: none).

    That one checkpoint is all a resumed run needs: it holds the model, the optimizer, the
    sampler and RNG states and the best weights so far with their validation figures (the
    trainer's ``state()``), from which the resumed run tests.  ``checkpoints/best``, the
    published copy, is left behind (it doubles the size); the resumed run publishes its own.
    The run may be training beside this and prune its checkpoints meanwhile, so the copy is
    checked against its manifest's sha256 sums and retried when it is torn."""
    from cmpnn_dist.runs.checkpoint import CheckpointError, read_manifest
    from cmpnn_dist.runs.checkpoint_store import CheckpointStore

    for _ in range(tries):
        shutil.rmtree(dst, ignore_errors=True)
        found = CheckpointStore(run).find_latest()
        if found is None:
            return -1
        try:
            shutil.copytree(found.path, dst / found.path.name)
            read_manifest(dst / found.path.name, verify_checksums=True)
            return found.step
        except (OSError, CheckpointError):
            time.sleep(1.0)
    raise RuntimeError(f"{run}: its checkpoints kept changing while they were copied")


def epoch_rows(src: Path) -> str:
    """``metrics.csv`` without its per-step training rows: the validation and test rows."""
    lines = src.read_text().splitlines(keepends=True)
    return "".join([lines[0], *(x for x in lines[1:] if not x.startswith("train,"))])


# a finished cell's per-query test ranks (head, relation, tail, direction, rank, candidates),
# from which any Hits@10_50 rule can score it again: the run's own (``eval.filter=all``) and
# those of its best weights under the paper's filter (``eval.filter=facts``)
RANKS = "ranks_test_all.parquet"
FACTS_RANKS = "ranks_test_filter_facts.parquet"


def facts_filter_metrics(run: Path, storage: Path, ranks_to: Path) -> dict:
    """Test metrics of the run's best weights under ``eval.filter=facts``; their per-query
    ranks are written to ``ranks_to``."""
    import tempfile

    import torch

    from cmpnn_dist.runs.load import load_model
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.validation import evaluate_split

    torch.set_num_threads(1)
    # on this CPU, whichever device trained the cell (one of a card says train.device=cuda)
    over = [f"storage_root={storage}", "eval.filter=facts", "train.device=cpu"]
    model, cfg, ds = load_model(run, over)
    data = load_train_data(ds, "facts")
    with tempfile.TemporaryDirectory(dir=ranks_to.parent) as tmp:
        out = evaluate_split(model, data.test, data.test.graph, cfg, data.num_relations,
                             ranks_dir=Path(tmp), progress=False, split_name="test")  # fmt: skip
        (written,) = Path(tmp).glob("ranks_test_*.parquet")
        written.rename(ranks_to)
    return {k: out[k] for k in ("mrr", "hits@10", "hits@10_50", "num_queries")}


def add_ranks(run: Path, storage: Path, cell: Path) -> bool:
    """Put a finished run's test ranks beside its archived cell, which was saved without
    them; the paper's-filter ranks are scored again and must give the archived figures.
    Returns whether anything was added."""
    if (cell / FACTS_RANKS).is_file() or not (run / RANKS).is_file():
        return False
    stage = cell / f".{FACTS_RANKS}.tmp"
    facts = facts_filter_metrics(run, storage, stage)
    archived_facts = json.loads((cell / "facts.json").read_text())
    if facts != archived_facts:
        stage.unlink()
        raise RuntimeError(f"{run}: scored again, {facts} is not the archived {archived_facts}")
    shutil.copy2(run / RANKS, cell / f".{RANKS}.tmp")
    (cell / f".{RANKS}.tmp").rename(cell / RANKS)
    stage.rename(cell / FACTS_RANKS)
    return True


PIECES = "pieces.json"  # per archived cell: the machine, code, first and last step of each piece
PIECE = "paper_inductive_piece.json"  # in the store: every piece ``run`` started there, in order


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _pieces(cell: Path) -> list[dict]:
    """An archived cell's ``pieces.json`` ([] before its first save)."""
    return json.loads((cell / PIECES).read_text()) if (cell / PIECES).is_file() else []


def _store_pieces(storage: Path) -> list[dict]:
    """The pieces started in ``storage``, oldest first (a single one: an older store's file)."""
    if not (storage / PIECE).is_file():
        return []
    found = json.loads((storage / PIECE).read_text())
    return [found] if isinstance(found, dict) else found


def start_piece(storage: Path, runs: list[str] | None = None, device: str | None = None) -> None:
    """Record in ``storage`` the machine and code of the piece starting there and each
    unfinished cell's step at its start (-1: from scratch), beside the pieces started there
    before, so that ``save`` can say which pieces moved a cell, even those that ended
    without a save.
    ``device``: the GPU the piece trains on (``paper_inductive_card.py``); None: the CPU."""
    storage.mkdir(parents=True, exist_ok=True)
    this = {"cpu": cpu_model(), "commit": git_commit("--short=12", mark_dirty=True),
            "started_utc": _now(),
            "from_step": {n: _step(storage / "runs" / n) for n in runs or run_names()
                          if not (storage / "runs" / n / "results.json").is_file()}}  # fmt: skip
    if device:
        this["device"] = device
    write_atomic(storage / PIECE, json.dumps([*_store_pieces(storage), this], indent=1))


UNKNOWN_CODE = "unknown (no piece record: trained outside `run`)"


def pieces_of(storage: Path, name: str, step: int, commit: str | None = None) -> list[dict]:
    """The pieces of ``storage`` that moved cell ``name``, now at ``step``: machine, code, and
    the steps each took it from and to (the next piece's start, or ``step``).  Without a
    record (a cell trained by hand with the sweep's command), one piece from an unknown step
    whose code is ``commit`` (``save --commit``), else said to be unknown: this checkout need
    not be the one the cell ran from."""
    here = [
        {"cpu": p["cpu"], "commit": p["commit"], "started_utc": p["started_utc"],
         "store": str(storage), "from_step": p.get("from_step", {}).get(name),
         **({"device": p["device"]} if "device" in p else {})}
        for p in _store_pieces(storage)
        if "from_step" not in p or name in p["from_step"]  # a piece that left it alone: none
    ]  # fmt: skip
    if not here:
        return [{"cpu": cpu_model(), "commit": commit or UNKNOWN_CODE,
                 "store": str(storage), "from_step": None, "until_step": step}]  # fmt: skip
    ends = [p["from_step"] for p in here[1:]] + [step]
    return [
        {**p, "until_step": end}
        for p, end in zip(here, ends, strict=True)
        if p["from_step"] is None or end is None or end > p["from_step"]
    ]


def _merge_pieces(known: list[dict], new: list[dict]) -> list[dict]:
    """The archived pieces updated by the store's: the same piece (machine, code, start,
    store) is replaced, another one is added after them."""
    same = ("cpu", "commit", "started_utc", "store")
    out = list(known)
    for p in new:
        at = [i for i, q in enumerate(out) if all(q.get(k) == p.get(k) for k in same)]
        if at:
            out[at[0]] = p
        else:
            out.append(p)
    return out


def save(
    storage: Path,
    archive: Path = ARCHIVE,
    runs: list[str] | None = None,
    commit: str | None = None,
) -> dict[str, list[str]]:
    """Archive every finished run (results, facts-filter metrics) and every unfinished run's
    newest valid checkpoint; returns the runs saved in each state.  ``commit``: the code of
    cells that have no piece record (:func:`pieces_of`)."""
    saved: dict[str, list[str]] = {"finished": [], "in progress": [], "ranks added": []}
    for name in runs or run_names():
        run, dst = storage / "runs" / name, archive / name
        if (dst / "facts.json").is_file() and add_ranks(run, storage, dst):
            saved["ranks added"].append(name)
        if (dst / "facts.json").is_file() or not run.is_dir():
            continue  # archived finished, or never started here
        stage = Path(f"{dst}.new")
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        if (run / "results.json").is_file():
            shutil.copy2(run / "results.json", stage / "results.json")
            (stage / "metrics.csv").write_text(epoch_rows(run / "metrics.csv"))
            if (run / RANKS).is_file():
                shutil.copy2(run / RANKS, stage / RANKS)
            facts = facts_filter_metrics(run, storage, stage / FACTS_RANKS)
            (stage / "facts.json").write_text(json.dumps(facts, indent=1) + "\n")
            state, step = "finished", json.loads((run / "results.json").read_text())["step"]
        else:
            step = _copy_checkpoint(run, stage / "checkpoints")
            if step <= _step(dst):
                shutil.rmtree(stage)
                continue
            state = "in progress"
        # which machines and code ran the cell up to this step (a cell may run in pieces)
        pieces = _merge_pieces(_pieces(dst), pieces_of(storage, name, step, commit))
        (stage / PIECES).write_text(json.dumps(pieces, indent=1) + "\n")
        shutil.rmtree(dst, ignore_errors=True)
        stage.rename(dst)
        saved[state].append(name)
    if any(saved.values()):
        pack(archive)  # the archive git keeps: <archive>.tar.gz
    return saved


def archived(archive: Path = ARCHIVE) -> tuple[list[dict], list[str]]:
    """Finished cells (split, variant, seed, metrics) and the unfinished cells' names."""
    done, todo = [], []
    for name, variant, split, seed in cells():
        cell = archive / name
        if not (cell / "facts.json").is_file():
            step = _step(cell) if cell.is_dir() else -1
            todo.append(name + (f" (step {step})" if step >= 0 else ""))
            continue
        res = json.loads((cell / "results.json").read_text())
        done.append({"split": split, "variant": variant, "seed": seed, "run": name,
                     "cpus": sorted({p.get("device", p["cpu"]) for p in _pieces(cell)}),
                     "test": res["test"],
                     "facts": json.loads((cell / "facts.json").read_text())})  # fmt: skip
    return done, todo


def table(out: Path, load: str, archive: Path = ARCHIVE) -> str:
    rows, todo = archived(archive)
    write_atomic(
        out / "paper_inductive_cpu.json",
        json.dumps({"cells": rows, "todo": todo, "prior_verdicts": prior_verdicts(rows)}, indent=1),
    )
    text = to_markdown(rows, todo, load)
    write_atomic(out / "paper_inductive_cpu.md", text)
    return text


def run_sweeps(storage: Path, steps: list[tuple[str, list[str] | None, list[str]]]) -> int:
    """Run each ``(sweep, splits or None: all, its cells)`` of ``steps`` in turn; 0, 1 (some
    sweeps had failed cells, named on stderr) or the status that ended the piece."""
    failed = []
    for name, only, names in steps:
        # a sweep with nothing left to run is not started (Ray's start-up is not free)
        if not all((storage / "runs" / n / "results.json").is_file() for n in names):
            # a sweep whose cells failed (exit status 1, the cells named on its stderr)
            # does not hold up the later ones (the next `run` tries its cells again); an
            # interrupted one (130 / 143) or a usage error (2) ends the piece
            status = run_passing_signals(sweep_command(name, storage, only))
            if status == 1:
                failed.append(name)
            elif status:
                return status
    if failed:
        print(f"sweeps with failed cells (see above): {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main_table(args: argparse.Namespace, storage: Path | None) -> int:
    """``run`` / ``save`` / ``restore`` / ``table`` of one of the other tables."""
    from benchmarks.accuracy import paper_tables

    t = TABLES[args.table]
    names = paper_tables.run_names(t)
    if args.action == "run":
        steps = [(s.name, None, [n for n in names if n.startswith(f"{s.name}/")])
                 for s in t.sweeps]  # fmt: skip
        if args.print:
            print("\n".join(child_command(sweep_command(n, storage)) for n, _, _ in steps))
            return 0
        print(f"restored: {restore(storage, t.archive, names) or 'nothing'}", flush=True)
        start_piece(storage, names)
        return run_sweeps(storage, steps)
    if args.action == "restore":
        print(f"restored: {restore(storage, t.archive, names) or 'nothing'}")
        return 0
    if args.action == "save":
        print(json.dumps(save(storage, t.archive, names, args.commit), indent=1))
    print(paper_tables.write(t, Path(args.out), args.load, _step))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("action", choices=["run", "save", "restore", "table"])
    tables = ["basic", *TABLES]  # basic: the eight splits; the others: paper_tables.py
    p.add_argument("--table", choices=tables, default="basic", help="which of the paper's tables")
    p.add_argument("--storage", help="the sweeps' storage_root (run / save / restore)")
    p.add_argument("--load", default="the sweep's other trial on the second core")
    p.add_argument("--out", default=str(results_dir(__file__)))
    p.add_argument("--print", action="store_true", help="run: print the commands, run nothing")
    p.add_argument(
        "--commit",
        help="save: the commit that cells with no piece record ran from "
        "(trained by hand with the sweep's command); default: unknown",
    )
    args = p.parse_args(argv)
    if args.action != "table" and not (args.storage or args.print):
        p.error(f"{args.action} needs --storage")
    storage = Path(args.storage).resolve() if args.storage else Path("STORE")
    if args.table != "basic":
        return main_table(args, storage)
    if args.action == "run":
        if args.print:
            print("\n".join(child_command(sweep_command(n, storage, only)) for n, only in plan()))
            return 0
        print(f"restored: {restore(storage) or 'nothing'}", flush=True)
        start_piece(storage)
        return run_sweeps(storage, [
            (name, only, [c[0] for c in cells() if c[0].startswith(f"{name}/") and c[2] in only])
            for name, only in plan()
        ])  # fmt: skip
    if args.action == "restore":
        print(f"restored: {restore(storage) or 'nothing'}")
        return 0
    if args.action == "save":
        print(json.dumps(save(storage, commit=args.commit), indent=1))
    print(table(Path(args.out), args.load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
