"""Does a preset's accuracy differ between two commits?  Same command, same seeds, same machine.

Each commit is checked out as a detached git worktree (``<storage>/src/<commit>``) and every
(commit, seed) cell runs the real CLI from it, one torch thread each, ``--parallel`` at a time,
the commits interleaved seed by seed so that machine load falls on both alike::

    python -m cmpnn_dist.train conf=<preset> train.seed=<s> run_name=<commit>-s<s> \
        train.progress=false storage_root=<storage>/runs_<commit> data_root=../shared/data \
        [--extra ...]

A cell whose run folder holds ``results.json`` is done and is not run again; an unfinished one
continues from its newest checkpoint (``resume`` is on by default at every commit compared),
so the comparison can be stopped and restarted with the same command.

The comparison uses what every commit reports the same way: test MRR and Hits@10 (filtered,
rule-free) and, where the run kept its per-query ranks, Hits@10 of 50 under each rule of
:mod:`cmpnn_dist.evaluation.metrics` re-scored by this checkout.  Welch's t statistic on the
seed means says whether the gap is larger than the seeds' spread allows.

    python -m benchmarks.accuracy.accuracy_commits --commits 884af48 HEAD --preset fb237_ind_v1 \
        --seeds 0 1 2 3 4 --parallel 2 --storage /tmp/acc [--collect]

Writes ``benchmarks/results/accuracy_commits_<preset>.json`` and ``.md``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import REPO, child_command, command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic

RESULTS = results_dir(__file__)
METRICS = ("mrr", "hits@10")
DATA_ROOT = (REPO.parent / "shared" / "data").resolve()  # the worktrees sit elsewhere


def resolve(commit: str) -> str:
    """Full hash of ``commit`` in this repository."""
    out = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", commit], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def checkout(storage: Path, sha: str) -> Path:
    """A detached worktree of ``sha`` under ``storage/src`` (made once)."""
    where = storage / "src" / sha[:7]
    if not (where / "cmpnn_dist").is_dir():
        where.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), sha],
            check=True,
            capture_output=True,
        )
    return where


def run_cell(storage: Path, sha: str, preset: str, seed: int, extra: list[str]) -> Path:
    """Train one (commit, seed) cell to the end, or find it done; returns its run folder."""
    root = storage / f"runs_{sha[:7]}"
    run_dir = root / "runs" / f"{sha[:7]}-s{seed}"
    if (run_dir / "results.json").is_file():
        return run_dir
    src = checkout(storage, sha)
    cmd = [
        sys.executable,
        "-m",
        "cmpnn_dist.train",
        f"conf={preset}",
        f"train.seed={seed}",
        f"run_name={run_dir.name}",
        "train.progress=false",
        f"storage_root={root}",
        f"data_root={DATA_ROOT}",
        *extra,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(src))
    log = storage / "logs" / f"{sha[:7]}-s{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(log, "a") as fh:
        fh.write(f"$ {child_command(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=src, env=env, stdout=fh, stderr=subprocess.STDOUT)
    print(
        f"{sha[:7]} seed {seed}: rc {proc.returncode} in {time.perf_counter() - start:.0f} s",
        flush=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{child_command(cmd)} failed; see {log}")
    return run_dir


def cell_row(run_dir: Path) -> dict:
    """Test metrics of a finished cell, with Hits@10 of 50 re-scored under every rule."""
    summary = json.loads((run_dir / "results.json").read_text())
    test = summary["test"]
    row = {
        "run_dir": str(run_dir),
        **{m: test[m] for m in METRICS},
        "hits@10_50_as_run": test.get("hits@10_50"),
        # a run that names no rule computed n_negatives, the only rule there was then
        "hits@10_50_rule_as_run": test.get("hits_negatives_rule", "n_negatives"),
    }
    ranks = run_dir / "ranks_test_all.parquet"
    if not ranks.is_file() and row["hits@10_50_as_run"] is not None:
        row[f"hits@10_50_{row['hits@10_50_rule_as_run']}"] = row["hits@10_50_as_run"]
    if ranks.is_file():
        import pyarrow.parquet as pq
        import torch

        from cmpnn_dist.evaluation.metrics import HITS_NEGATIVES_RULES, hits_at_k_with_negatives

        t = pq.read_table(ranks)
        rank = torch.tensor(t.column("rank").to_numpy(), dtype=torch.float64)
        cands = torch.tensor(t.column("candidates").to_numpy())
        for rule in HITS_NEGATIVES_RULES:
            row[f"hits@10_50_{rule}"] = float(
                hits_at_k_with_negatives(rank, cands, 10, 50, rule).mean()
            )
    return row


def welch_t(a: list[float], b: list[float]) -> float:
    """Welch's t statistic of mean(b) - mean(a) (nan with fewer than two values a side)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return (statistics.mean(b) - statistics.mean(a)) / se if se > 0 else math.inf


def summarise(rows: dict[str, list[dict]], commits: list[str]) -> dict:
    keys = sorted(
        {
            k
            for rs in rows.values()
            for r in rs
            for k in r
            if k in METRICS
            or (k.startswith("hits@10_50_") and "rule" not in k and k != "hits@10_50_as_run")
        }
    )
    out: dict = {}
    for key in keys:
        per = {c: [r[key] for r in rows[c] if r.get(key) is not None] for c in commits}
        out[key] = {
            c: {
                "values": v,
                "mean": statistics.mean(v) if v else None,
                "std": statistics.stdev(v) if len(v) > 1 else None,
            }
            for c, v in per.items()
        }
        if len(commits) == 2:
            out[key]["welch_t"] = welch_t(per[commits[0]], per[commits[1]])
    return out


def markdown(result: dict) -> str:
    commits = result["commits"]
    lines = [
        f"# {result['preset']}: accuracy at {' vs '.join(c[:7] for c in commits)}",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']}; load: {result['load']}",
        f"- this checkout (re-scoring): {result['checkout']}; date: {result['date']}",
        "- each cell: the real CLI from a worktree of the commit, one torch thread, best epoch by",
        "  valid MRR; metrics on the test split.  Welch t: (mean of the second commit - mean of",
        "  the first) / its standard error; |t| > 2.3 (about p < 0.05 at these sizes) is a",
        "  difference the seeds' spread does not explain.",
        "",
        "| metric | "
        + " | ".join(
            f"{c[:7]} (seeds {', '.join(str(r['seed']) for r in result['cells'][c])})"
            for c in commits
        )
        + " | Welch t |",
        "|---|" + "---|" * (len(commits) + 1),
    ]
    for key, cell in result["summary"].items():
        parts = []
        for c in commits:
            v = cell[c]
            if not v["values"]:
                parts.append("n/a")
                continue
            vals = ", ".join(f"{x:.3f}" for x in v["values"])
            std = f" +- {v['std']:.3f}" if v["std"] is not None else ""
            parts.append(f"{vals} (mean {v['mean']:.3f}{std})")
        t = cell.get("welch_t", math.nan)
        lines.append(f"| {key} | " + " | ".join(parts) + f" | {t:.2f} |")
    lines += ["", result.get("reading", "")]
    return "\n".join(lines) + "\n"


def recorded_command(argv: list[str]) -> str:
    """The command that runs these cells: ``argv`` quoted, less ``--collect`` and ``--reading``
    (a summary's own options, which the cells do not depend on)."""
    return command_line(__file__, argv, drop_flags=("--collect",), drop_options=("--reading",))


def main() -> None:
    parser = make_parser(__doc__, __file__)
    parser.add_argument("--commits", nargs=2, required=True)
    parser.add_argument("--preset", default="fb237_ind_v1")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--extra", nargs="*", default=[])
    parser.add_argument("--storage", required=True)
    parser.add_argument(
        "--load",
        default="idle apart from the cells themselves",
        help="what else ran on the machine, for the results header",
    )
    parser.add_argument("--reading", default="", help="a paragraph of interpretation")
    parser.add_argument("--collect", action="store_true", help="only summarise the finished cells")
    parser.add_argument(
        "--cells",
        nargs="*",
        metavar="COMMIT:SEED",
        help="run only these cells, in this order (default: every seed of "
        "both commits, interleaved)",
    )
    args = parser.parse_args()
    storage = Path(args.storage).resolve()
    commits = [resolve(c) for c in args.commits]
    cells = [(c, s) for s in args.seeds for c in commits]
    todo = cells
    if args.cells:
        todo = [(resolve(c), int(s)) for c, _, s in (x.rpartition(":") for x in args.cells)]
    if not args.collect:
        with ThreadPoolExecutor(args.parallel) as pool:
            list(
                pool.map(lambda cs: run_cell(storage, cs[0], args.preset, cs[1], args.extra), todo)
            )
    rows: dict[str, list[dict]] = {c: [] for c in commits}
    for c, s in cells:
        run_dir = storage / f"runs_{c[:7]}" / "runs" / f"{c[:7]}-s{s}"
        if (run_dir / "results.json").is_file():
            rows[c].append({"seed": s, **cell_row(run_dir)})
    import torch

    result = {
        "benchmark": "accuracy_commits",
        "preset": args.preset,
        "commits": commits,
        "seeds": " ".join(map(str, args.seeds)),
        "command": recorded_command(sys.argv[1:]),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, "
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}",
        "load": args.load,
        "checkout": git_commit("--short", mark_dirty=True),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "extra": args.extra,
        "summary": summarise(rows, commits),
        "cells": rows,
        "reading": args.reading,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"accuracy_commits_{args.preset}"
    write_atomic(stem.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
    write_atomic(stem.with_suffix(".md"), markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
