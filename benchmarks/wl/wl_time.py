"""Time the relational WL tests (cmpnn_dist.wl) on the GraIL v1 splits.

For each split's message graph (``train.txt`` of fb237_v1, fb237_v1_ind, WN18RR_v1,
WN18RR_v1_ind) and each test (rwl1, rwl1+, rawl2, rawl2+, rwl2, rwl2+): ``--rounds`` rounds
(default 6, the depth of the paper's C-MPNN) or, with ``--stable``, until the colouring is
stable; wall seconds, seconds per round, colour classes.  Side by side in the same run: one
round of rawl2 by the dict-based reference of the tests (tests/helpers/wl_reference.py) against the
vectorised one on the smallest split, and their ratio.  Results: results/wl_time.{json,md}.

    python -m benchmarks.wl.wl_time [--rounds 6 | --stable] [--splits fb237_v1 ...]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, git_commit
from benchmarks.harness.results import results_dir, write_atomic
from cmpnn_dist.wl import TESTS, read_kg, run_test
from tests.helpers import wl_reference as reference  # the brute-force reference

ROOT = Path(__file__).resolve().parents[2]

RESULTS = results_dir(__file__)
SPLITS = ("fb237_v1", "fb237_v1_ind", "WN18RR_v1", "WN18RR_v1_ind")


def main() -> None:
    parser = make_parser(__doc__, __file__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--stable", action="store_true", help="run every test until stable")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS))
    parser.add_argument("--tests", nargs="+", default=list(TESTS), choices=TESTS)
    parser.add_argument("--repeats", type=int, default=1, help="median over repeats")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", default="wl_time")
    args = parser.parse_args()
    rounds = None if args.stable else args.rounds
    rows = []
    graphs = {}
    for split in args.splits:
        path = args.data / "inductive" / split / "train.txt"
        if not path.is_file():
            sys.exit(f"error: {path}: file not found (GraIL splits under --data)")
        graphs[split] = read_kg(path)[0]
    jobs = [(s, t) for s in args.splits for t in args.tests]
    for split, test in tqdm(jobs, desc="wl_time", file=sys.stderr):
        kg = graphs[split]
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            col = run_test(kg, test, rounds)
            times.append(time.perf_counter() - start)
        sec = statistics.median(times)
        rows.append(
            {
                "split": split,
                "test": test,
                "num_nodes": kg.num_nodes,
                "num_facts": kg.num_edges,
                "num_relations": kg.num_relations,
                "rounds": col.rounds,
                "stable": col.stable,
                "num_colours": col.num_colours[-1],
                "seconds": sec,
                "seconds_per_round": sec / max(col.rounds, 1),
            }
        )
        tqdm.write(json.dumps(rows[-1]), file=sys.stderr)
    # side by side: one round of rawl2, dict-based reference vs vectorised, smallest split
    small = min(args.splits, key=lambda s: graphs[s].num_nodes)
    kg = graphs[small]
    start = time.perf_counter()
    ref = reference.rawl2(kg.num_nodes, kg.triples(), 1)
    ref_sec = time.perf_counter() - start
    start = time.perf_counter()
    fast = run_test(kg, "rawl2", 1).colours
    fast_sec = time.perf_counter() - start
    same = reference.same_partition(ref, {k: fast[k] for k in ref})
    compare = {
        "split": small,
        "test": "rawl2",
        "rounds": 1,
        "reference_seconds": ref_sec,
        "vectorised_seconds": fast_sec,
        "speedup": ref_sec / fast_sec,
        "same_partition": same,
    }
    result = {
        "benchmark": "wl_time",
        "command": command_line(__file__, sys.argv[1:]),
        "git_commit": git_commit("--short"),
        "machine": f"{platform.node()} {platform.machine()} {platform.platform()}, "
        f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}",
        "rounds": "stable" if rounds is None else rounds,
        "runs": rows,
        "reference_vs_vectorised": compare,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / f"{args.out}.json", json.dumps(result, indent=2))
    what = "until stable" if rounds is None else f"{rounds} rounds"
    lines = [
        f"# Relational WL tests on the GraIL v1 message graphs ({what})",
        "",
        f"`{result['command']}` at commit {result['git_commit']}, {result['machine']}.",
        "Seconds are wall time of `run_test` (median of "
        f"{args.repeats}); pair tests colour all N^2 pairs.",
        "",
        "| split | N | facts | test | rounds | stable | colours | seconds | s / round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['split']} | {r['num_nodes']} | {r['num_facts']} | {r['test']} | "
            f"{r['rounds']} | {'yes' if r['stable'] else 'no'} | {r['num_colours']} | "
            f"{r['seconds']:.2f} | {r['seconds_per_round']:.3f} |"
        )
    lines += [
        "",
        f"Side by side, one round of rawl2 on {small}: dict-based reference "
        f"{ref_sec:.2f} s, vectorised {fast_sec:.3f} s, speedup {compare['speedup']:.0f}x, "
        f"same partition: {same}.",
    ]
    write_atomic(RESULTS / f"{args.out}.md", "\n".join(lines) + "\n")
    print("\n".join(lines[4:]))


if __name__ == "__main__":
    main()
