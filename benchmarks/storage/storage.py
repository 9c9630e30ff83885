"""Graph-store benchmark on the biokg-scale synthetic graph (4,762,677 training facts).

Side by side in one run (medians of --repeats):
  * conversion: TSV (train/valid/test.txt) -> Arrow dataset with 4 CSR shards, facts/s;
  * open: ``open_dataset`` + map all shards (structural checks included): seconds and resident
    memory growth (/proc/self/statm), in a fresh process each time; zero-copy is checked
    (every shard tensor's data pointer lies in a file mapping of /proc/self/maps);
  * the same graph loaded from the TSV with pandas (read_csv + factorize + CSR build);
  * the same CSR tensors loaded from a ``torch.save`` file (torch.load, and mmap=True).

    python -m benchmarks.storage.storage [--repeats 3] [--scale 1.0] \\
        [--workdir /tmp/cmpnn_storage_bench]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, module_argv
from benchmarks.harness.results import results_dir

RESULTS = results_dir(__file__)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def mapped_ranges(substr: str) -> list[tuple[int, int]]:
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if substr in line:
                a, b = line.split()[0].split("-")
                out.append((int(a, 16), int(b, 16)))
    return out


# ----------------------------------------------------------------- child measurements
def child_open(path: str) -> dict:
    import torch  # noqa: F401  (imports are not part of the measurement)

    from cmpnn_dist.storage import open_dataset

    r0, t0 = rss_bytes(), time.perf_counter()
    ds = open_dataset(path)
    g = ds.graph_data("train")
    shards = g.shards()
    t1, r1 = time.perf_counter(), rss_bytes()
    ranges = mapped_ranges(str(Path(path).resolve()))
    views = all(
        any(a <= t.data_ptr() < b for a, b in ranges)
        for s in shards
        for t in (s.indptr, s.src, s.rel)
        if t.numel()
    )
    t2 = time.perf_counter()
    graph = g.graph()
    t3, r3 = time.perf_counter(), rss_bytes()
    return {
        "open_s": t1 - t0,
        "open_rss_mb": (r1 - r0) / 2**20,
        "zero_copy": views,
        "edges": int(sum(s.num_edges for s in shards)),
        "graph_concat_s": t3 - t2,
        "graph_concat_rss_mb": (r3 - r1) / 2**20,
        "num_edges": graph.num_edges,
    }


def child_pandas(tsv: str) -> dict:
    import numpy as np
    import pandas as pd

    from cmpnn_dist.storage.csr import fast_csr

    r0, t0 = rss_bytes(), time.perf_counter()
    df = pd.read_csv(
        Path(tsv) / "train.txt", sep="\t", header=None, names=["h", "r", "t"], dtype=str, engine="c"
    )
    t1 = time.perf_counter()
    ent, uniq = pd.factorize(pd.concat([df["h"], df["t"]], ignore_index=True), sort=True)
    rel, runiq = pd.factorize(df["r"], sort=True)
    n = len(df)
    facts = np.stack([ent[:n], rel, ent[n:]], axis=1).astype(np.int64)
    indptr, src, relc = fast_csr(len(uniq), len(runiq), facts)
    t2, r2 = time.perf_counter(), rss_bytes()
    return {
        "read_csv_s": t1 - t0,
        "load_graph_s": t2 - t0,
        "rss_mb": (r2 - r0) / 2**20,
        "edges": int(len(src)),
    }


def child_torch(pt: str, mmap: bool) -> dict:
    import torch

    r0, t0 = rss_bytes(), time.perf_counter()
    d = torch.load(pt, mmap=mmap)
    s = int(d["src"].sum()) if mmap else 0  # touch (mmap: pages fault in like a real use)
    t1, r1 = time.perf_counter(), rss_bytes()
    return {
        "load_s": t1 - t0,
        "rss_mb": (r1 - r0) / 2**20,
        "edges": int(d["src"].numel()),
        "touched": bool(s or not mmap),
    }


def run_child(*args: str) -> dict:
    out = subprocess.run(
        [*module_argv(__file__), "--child", *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- driver
def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default="/tmp/cmpnn_storage_bench")
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        fn = {
            "open": lambda: child_open(rest[0]),
            "pandas": lambda: child_pandas(rest[0]),
            "torch": lambda: child_torch(rest[0], rest[1] == "mmap"),
        }[kind]
        print(json.dumps(fn()))
        return

    import torch

    from cmpnn_dist.convert import build_dataset
    from cmpnn_dist.convert.synthetic.biokg_scale import write_tsv
    from cmpnn_dist.storage import open_dataset

    work = Path(args.workdir)
    tsv, ds_path, pt = work / "tsv", work / "dataset", work / "graph.pt"
    params = {"scale": args.scale}
    stamp = work / f"tsv_scale_{args.scale}.json"
    if not stamp.is_file():
        t = time.perf_counter()
        counts = write_tsv(tsv, params)
        stamp.write_text(json.dumps(counts))
        print(f"generated TSV in {time.perf_counter() - t:.1f}s: {counts}", file=sys.stderr)
    counts = json.loads(stamp.read_text())
    total = sum(counts.values())
    load_before = os.getloadavg()

    conv = []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        build_dataset(
            "tsv:transductive",
            ds_path,
            raw_path=tsv,
            node_types="prefix",
            num_shards=4,
            name="biokg_scale",
        )
        conv.append({"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0})
    g = open_dataset(ds_path).graph_data("train").graph()
    torch.save({"indptr": g.indptr.clone(), "src": g.src.clone(), "rel": g.rel.clone()}, pt)
    del g
    opens = [run_child("open", str(ds_path)) for _ in range(args.repeats)]
    pandas = [run_child("pandas", str(tsv)) for _ in range(args.repeats)]
    tload = [run_child("torch", str(pt), "full") for _ in range(args.repeats)]
    tmmap = [run_child("torch", str(pt), "mmap") for _ in range(args.repeats)]
    conv_s = med(conv, "s")
    res = {
        "benchmark": "storage",
        "command": command_line(__file__, sys.argv[1:]),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "pyarrow": __import__("pyarrow").__version__,
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "graph": {"facts": counts, "edges_with_inverses": opens[0]["edges"], "scale": args.scale},
        "repeats": args.repeats,
        "convert": {
            "median_s": conv_s,
            "best_s": min(c["s"] for c in conv),
            "median_cpu_s": med(conv, "cpu_s"),
            "facts_per_s": total / conv_s,
            "runs": conv,
        },
        "open_all_shards": {
            "median_s": med(opens, "open_s"),
            "best_s": min(x["open_s"] for x in opens),
            "median_rss_growth_mb": med(opens, "open_rss_mb"),
            "zero_copy": all(o["zero_copy"] for o in opens),
            "graph_concat_median_s": med(opens, "graph_concat_s"),
            "runs": opens,
        },
        "pandas_tsv": {
            "read_csv_median_s": med(pandas, "read_csv_s"),
            "load_graph_median_s": med(pandas, "load_graph_s"),
            "median_rss_growth_mb": med(pandas, "rss_mb"),
            "runs": pandas,
        },
        "torch_load": {
            "median_s": med(tload, "load_s"),
            "median_rss_growth_mb": med(tload, "rss_mb"),
            "runs": tload,
        },
        "torch_load_mmap": {
            "median_s": med(tmmap, "load_s"),
            "median_rss_growth_mb": med(tmmap, "rss_mb"),
            "runs": tmmap,
        },
    }
    o = res["open_all_shards"]
    res["ratios"] = {
        "pandas_load_over_open": res["pandas_tsv"]["load_graph_median_s"] / o["median_s"],
        "torch_load_over_open": res["torch_load"]["median_s"] / o["median_s"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if args.scale == 1.0 else f"_scale{args.scale}"
    (RESULTS / f"storage{suffix}.json").write_text(json.dumps(res, indent=1))
    m = res["machine"]
    pt_, tl_, tm_ = res["pandas_tsv"], res["torch_load"], res["torch_load_mmap"]
    rows = [
        ("what", "time (s)", "resident growth (MB)", "note"),
        ("---", "---", "---", "---"),
        (
            "convert TSV -> Arrow shards",
            f"{conv_s:.2f}",
            "",
            f"{total / conv_s / 1e6:.2f} M facts/s wall, "
            f"{total / res['convert']['median_cpu_s'] / 1e6:.2f} M facts per CPU-s, best run "
            f"{total / res['convert']['best_s'] / 1e6:.2f} M facts/s wall (target >= 1)",
        ),
        (
            "open all shards (mmap)",
            f"{o['median_s']:.3f}",
            f"{o['median_rss_growth_mb']:.0f}",
            f"best {o['best_s']:.3f} s; zero-copy views: {o['zero_copy']}",
        ),
        (
            "+ concatenate 4 shards to one Graph",
            f"{o['graph_concat_median_s']:.3f}",
            "",
            "copies src/rel",
        ),
        (
            "pandas read_csv + factorize + CSR",
            f"{pt_['load_graph_median_s']:.2f}",
            f"{pt_['median_rss_growth_mb']:.0f}",
            f"read_csv alone {pt_['read_csv_median_s']:.2f} s",
        ),
        (
            "torch.load of saved CSR tensors",
            f"{tl_['median_s']:.3f}",
            f"{tl_['median_rss_growth_mb']:.0f}",
            "",
        ),
        (
            "torch.load(mmap=True) + touch src",
            f"{tm_['median_s']:.3f}",
            f"{tm_['median_rss_growth_mb']:.0f}",
            "",
        ),
    ]
    table = "\n".join("| " + " | ".join(r) + " |" for r in rows)
    md = f"""# Graph-store benchmark (`{res["command"]}`)

Machine: {m["platform"]}, {m["cpu_count"]} CPUs, Python {m["python"]}, torch {m["torch"]},
pyarrow {m["pyarrow"]}; load average before/after {m["loadavg_before"][0]:.1f} /
{m["loadavg_after"][0]:.1f} (other jobs shared the machine).  Graph: biokg-scale synthetic,
{total:,} facts ({counts["train"]:,} train), {o["runs"][0]["edges"]:,} CSR edges with
inverses, 4 shards.  Medians of {args.repeats} runs; open/load each in a fresh process,
page cache warm.

{table}

Opening is {res["ratios"]["pandas_load_over_open"]:.0f}x faster than pandas and
{res["ratios"]["torch_load_over_open"]:.1f}x faster than torch.load.
"""
    (RESULTS / f"storage{suffix}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
