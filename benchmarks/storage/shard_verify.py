"""What the sha256 check of a dataset's files costs when it is opened (biokg scale).

The graph is ``synthetic:biokg_scale`` (93,773 nodes, 4,762,677 training facts, 4 CSR shards),
built once through the real converter into ``--workdir``.  Each round opens it in a fresh
process four ways, in turn (``open_dataset`` + mapping every shard of graph ``train`` with
its structural checks, which read every shard byte; page cache warm, imports excluded):

* ``none``: sizes and structure only (``verify="none"``);
* ``full``: every file hashed (``verify="full"``, as ``python -m cmpnn_dist.storage verify``);
* ``stamp_hit``: the default (``verify="stamp"``) with a verification stamp vouching for
  every file (every open after the first of an unchanged dataset);
* ``stamp_miss``: the default with no stamp (the first open after a build or a change):
  every file hashed, then the stamp written.

    python -m benchmarks.storage.shard_verify [--rounds 5] [--scale 1.0] [--workdir DIR]

writes ``benchmarks/results/shard_verify_cpu.{json,md}`` (medians over the rounds).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import REPO, command_line, git_commit, module_argv
from benchmarks.harness.results import results_dir, write_atomic
from benchmarks.harness.timing import interleaved

RESULTS = results_dir(__file__)
MODES = ("none", "full", "stamp_hit", "stamp_miss")


def child(path: str, mode: str) -> dict:
    import torch  # noqa: F401  (imports are not part of the measurement)

    from cmpnn_dist.storage import integrity, open_dataset

    verify = {"none": "none", "full": "full"}.get(mode, "stamp")
    t0 = time.perf_counter()
    ds = open_dataset(path, verify=verify)
    t1 = time.perf_counter()
    shards = ds.graph_data("train").shards()
    t2 = time.perf_counter()
    stamped = len(integrity.read_stamp(Path(path)))
    return {
        "open_s": t1 - t0,
        "map_s": t2 - t1,
        "total_s": t2 - t0,
        "edges": int(sum(s.num_edges for s in shards)),
        "stamped_files": stamped,
    }


def run_child(path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [*module_argv(__file__), "--child", str(path), mode],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default="/tmp/cmpnn_shard_verify_bench")
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return

    from cmpnn_dist.convert import build_dataset
    from cmpnn_dist.storage import integrity
    from cmpnn_dist.storage.format import read_manifest

    path = Path(args.workdir) / f"biokg_scale_{args.scale}"
    if not (path / "manifest.json").is_file():
        t = time.perf_counter()
        build_dataset("synthetic:biokg_scale", path, synthetic={"scale": args.scale}, num_shards=4)
        print(f"built {path} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    manifest = read_manifest(path)
    total_bytes = sum(f["bytes"] for f in manifest["files"].values())
    shard_bytes = sum(
        manifest["files"][s["file"]]["bytes"] for s in manifest["graphs"]["train"]["shards"]
    )
    # a stamp needs files older than SETTLE_NS: wait for that, then write it with one open
    newest = max(os.stat(path / name).st_ctime_ns for name in manifest["files"])
    wait = (newest + integrity.SETTLE_NS - time.time_ns()) / 1e9 + 0.1
    if wait > 0:
        time.sleep(wait)
    (path / integrity.STAMP).unlink(missing_ok=True)
    run_child(path, "stamp_miss")
    stamp = path / integrity.STAMP
    saved = stamp.with_name(stamp.name + ".saved")
    shutil.copyfile(stamp, saved)

    load_before = os.getloadavg()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def case(mode: str):
        def run() -> dict:
            if mode == "stamp_miss":
                stamp.unlink(missing_ok=True)
            else:
                shutil.copyfile(saved, stamp)
            return run_child(path, mode)

        return run

    def progress(r: int, _: dict) -> None:
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    # rounds of every mode once, who goes first rotating from round to round
    rows = interleaved({m: case(m) for m in MODES}, args.rounds, progress=progress)
    shutil.copyfile(saved, stamp)
    saved.unlink()
    load_after = os.getloadavg()

    import pyarrow
    import torch

    med = {
        m: {k: statistics.median(x[k] for x in rows[m]) for k in ("open_s", "map_s", "total_s")}
        for m in MODES
    }
    for m in MODES:
        assert all(x["stamped_files"] == len(manifest["files"]) for x in rows[m] if m != "none")
    base = med["none"]["total_s"]
    res = {
        "benchmark": "shard_verify",
        "command": command_line(__file__, sys.argv[1:]),
        "date": started,
        "commit": git_commit(mark_dirty=True),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "pyarrow": pyarrow.__version__,
        },
        "load": {"loadavg_before": load_before, "loadavg_after": load_after},
        "dataset": {
            "source": "synthetic:biokg_scale",
            "scale": args.scale,
            "files": len(manifest["files"]),
            "bytes": total_bytes,
            "shard_bytes": shard_bytes,
            "edges": rows["none"][0]["edges"],
        },
        "rounds": args.rounds,
        "median_s": med,
        "ratio_to_none": {m: med[m]["total_s"] / base for m in MODES},
        "sha256_mb_per_s": total_bytes / 2**20 / (med["full"]["open_s"] - med["none"]["open_s"]),
        "runs": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.scale == 1.0 else f"_scale{args.scale}"
    write_atomic(RESULTS / f"shard_verify_cpu{suffix}.json", json.dumps(res, indent=1) + "\n")
    label = {
        "none": 'no content check (`verify="none"`)',
        "full": 'every byte hashed (`verify="full"`)',
        "stamp_hit": "default, stamp vouches for every file",
        "stamp_miss": "default, no stamp yet (hash all + write stamp)",
    }
    table = [
        "| open | content check (s) | + map shards (s) | total (s) | x no check |",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in MODES:
        t = med[m]
        table.append(
            f"| {label[m]} | {t['open_s']:.3f} | {t['map_s']:.3f} | {t['total_s']:.3f} | "
            f"{res['ratio_to_none'][m]:.1f} |"
        )
    m = res["machine"]
    md = f"""# Sha256 check of a dataset's files on open, biokg scale

- command: `{res["command"]}`
- machine: {m["platform"]}, {m["cpu_count"]} CPUs ({m["processor"] or "x86_64"}),
  Python {m["python"]}, torch {m["torch"]}, pyarrow {m["pyarrow"]}
- load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}
  (a shared machine: other jobs ran beside it)
- commit: {res["commit"]}
- date: {started}

Dataset: `synthetic:biokg_scale` (scale {args.scale}), {len(manifest["files"])} files, \
{total_bytes / 2**20:.0f} MiB ({shard_bytes / 2**20:.0f} MiB in the 4 CSR shards of graph \
`train`), {res["dataset"]["edges"]:,} edges with inverses.  Each open in a fresh process, \
page cache warm, imports excluded; medians of {args.rounds} interleaved rounds (the order \
rotates each round).  "content check" is `open_dataset` (manifest, sizes, sha256 as the \
mode says); "map shards" maps the 4 shards of graph `train` with their structural checks.

{chr(10).join(table)}

Hashing runs at {res["sha256_mb_per_s"]:.0f} MiB/s here: a full check on every open costs \
{med["full"]["open_s"] - med["none"]["open_s"]:.2f} s more per process \
({res["ratio_to_none"]["full"]:.1f}x the open without it); with the stamp an unchanged \
dataset opens in {res["ratio_to_none"]["stamp_hit"]:.2f}x the time of no check, and only the \
first open after a build or a change pays the hash.
"""
    write_atomic(RESULTS / f"shard_verify_cpu{suffix}.md", md)
    print(md)


if __name__ == "__main__":
    main()
