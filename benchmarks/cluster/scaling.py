"""Data-parallel scaling: training queries/s with 1..N Ray Train workers, and checkpoint cost.

Part 1 (``--workers 1 2``): the same run (same global batch, same steps) with each worker
count, through ``run_distributed`` with the per-step timing hooks on (``CMPNN_TIMING=1``):
queries/s = global batch / rank 0's mean step time, and the step split into
forward, backward (including overlapped all-reduce), all-reduce (gradient buckets), checkpoint
save (state_dicts + torch.save + fsync), checkpoint report (Ray copy to the run folder) and
restore (measured on a resumed run: load + verify + load_state_dict).  Repeats ``--repeats``
times and quotes medians; a cluster is used with ``--address`` (or ``RAY_ADDRESS``).

Part 2 (``--biokg``): checkpoint size and save / restore time of the biokg configuration
(``conf/biokg.yaml``'s model on 51 relations, Adam state after one step), measured in process
with the loop's own checkpoint writer.

    python -m benchmarks.cluster.scaling                          # 1 and 2 workers here + biokg
    python -m benchmarks.cluster.scaling --workers 1 2 4 8 --use-gpu --address auto --steps 200

Results: benchmarks/results/cluster/scaling.json and scaling.md (machine named).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import cpu_model
from benchmarks.harness.results import results_dir
from cmpnn_dist.config import Config

ROOT = Path(__file__).resolve().parents[2]
RESULTS = results_dir(__file__)


def machine() -> str:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu_model()}, {os.cpu_count()} cores, {gpu}, torch {torch.__version__}"


def bench_cfg(args, root: Path, name: str, workers: int) -> Config:
    cfg = Config()
    cfg.storage_root = str(root)
    cfg.run_name = name
    cfg.data.name = "scaling"
    cfg.model.num_layers = args.layers
    cfg.model.hidden_dim = args.hidden
    cfg.train.batch_size = args.batch
    cfg.train.num_negatives = 32
    cfg.train.max_steps = args.steps
    cfg.train.device = "cuda" if args.use_gpu else "cpu"
    cfg.train.progress = False
    cfg.train.log_every = 10**9
    cfg.eval.max_queries = 16
    cfg.eval.splits = ["valid"]
    cfg.checkpoint.every_steps = args.every
    cfg.cluster.num_workers = workers
    cfg.cluster.use_gpu = args.use_gpu
    cfg.cluster.cpus_per_worker = args.cpus_per_worker
    cfg.cluster.address = args.address
    return cfg


def run_scaling(args, dataset: Path, work: Path) -> list[dict]:
    import ray

    from cmpnn_dist.distributed import run_distributed
    from cmpnn_dist.runs.checkpoint_store import CheckpointStore

    os.environ["CMPNN_TIMING"] = "1"
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(
            num_cpus=max(os.cpu_count() or 1, max(args.workers) * args.cpus_per_worker),
            include_dashboard=False,
        )
    rows = []
    for workers in args.workers:
        reps = []
        for rep in range(args.repeats):
            root = work / f"w{workers}-r{rep}"
            cfg = bench_cfg(args, root, "run", workers)
            start = time.perf_counter()
            out = run_distributed(cfg, dataset)
            wall = time.perf_counter() - start
            restore = None
            if rep == 0:  # resume from the second newest checkpoint: restore time
                newest = CheckpointStore(out["run_dir"]).candidates()[0][1]
                (Path(newest) / "manifest.json").unlink()
                resumed = run_distributed(cfg, dataset)
                restore = resumed["context_timing_s"].get("checkpoint_restore")
            t, c = out["timing"], out["context_timing_s"]
            saves = max(c.get("checkpoint_saves", 0), 1)
            reps.append(
                {
                    "wall_s": wall,
                    "step_s": t["step_s"],
                    "forward_s": t["forward_s"],
                    "backward_s": t["backward_s"],
                    "all_reduce_s": t.get("all_reduce_s", 0.0),
                    "metrics_all_reduce_s": c.get("all_reduce_metrics", 0.0) / max(t["steps"], 1),
                    "checkpoint_save_s": c.get("checkpoint_save", 0.0) / saves,
                    "checkpoint_report_s": c.get("checkpoint_report", 0.0) / saves,
                    "checkpoint_restore_s": restore,
                    "checkpoint_bytes": c.get("checkpoint_bytes"),
                }
            )
        med = {
            k: statistics.median(r[k] for r in reps if r[k] is not None)
            for k in reps[0]
            if any(r[k] is not None for r in reps)
        }
        med["workers"] = workers
        med["queries_per_s"] = args.batch / med["step_s"]
        med["repeats"] = args.repeats
        rows.append(med)
        print(json.dumps(med), flush=True)
    base = rows[0]["queries_per_s"]
    for r in rows:
        r["speedup_vs_first"] = r["queries_per_s"] / base
    return rows


def biokg_checkpoint(repeats: int) -> dict:
    """Checkpoint size / save / restore of conf/biokg.yaml's model on 51 relations."""
    import yaml

    from cmpnn_dist.runs.checkpoint import load_checkpoint, save_checkpoint
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import train_data_from_triples
    from cmpnn_dist.training.trainer import Trainer

    preset = yaml.safe_load((ROOT / "conf" / "biokg.yaml").read_text())
    cfg = Config()
    for section in ("model", "train"):
        for k, v in preset.get(section, {}).items():
            setattr(getattr(cfg, section), k, v)
    cfg.train.batch_size = 8
    cfg.train.device = "cpu"
    num_rel, n = 51, 500
    g = torch.Generator().manual_seed(0)
    facts = torch.stack(
        [
            torch.randint(0, n, (4000,), generator=g),
            torch.randint(0, num_rel, (4000,), generator=g),
            torch.randint(0, n, (4000,), generator=g),
        ],
        1,
    )
    data = train_data_from_triples(n, num_rel, facts[:3800], facts[3800:3900], facts[3900:])
    with tempfile.TemporaryDirectory() as tmp:
        ctx = LocalContext(Path(tmp) / "run", tensorboard=False)
        trainer = Trainer(cfg, data, ctx, None)
        trainer.train_step(trainer.model)  # Adam moments exist
        trainer.best_state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        saves, loads = [], []
        for i in range(repeats):
            path = Path(tmp) / f"step_{i:08d}"
            t0 = time.perf_counter()
            save_checkpoint(path, trainer.state())
            saves.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            state = load_checkpoint(path)
            trainer.model.load_state_dict(state["model"])
            trainer.optimizer.load_state_dict(state["optimizer"])
            loads.append(time.perf_counter() - t0)
        size = sum(f.stat().st_size for f in path.iterdir())
    params = sum(p.numel() for p in trainer.model.parameters())
    return {
        "num_relations": num_rel,
        "parameters": params,
        "checkpoint_bytes": size,
        "save_s": statistics.median(saves),
        "restore_s": statistics.median(loads),
        "model": preset["model"],
        "repeats": repeats,
    }


def write_markdown(result: dict, path: Path) -> None:
    lines = [
        f"# Scaling benchmark ({result['date']})",
        "",
        f"Machine: {result['machine']}",
        "",
        f"Run: {result['setup']}",
        "",
    ]
    if "load_average_1min" in result:
        la = result["load_average_1min"]
        lines += [
            f"1-minute load average at start / end: {la['start']:.1f} / {la['end']:.1f} "
            "(above the core count, other processes shared the CPUs: ratios are noisy)",
            "",
        ]
    if result.get("scaling"):
        lines += [
            "| workers | queries/s | speedup | step ms | forward ms | backward ms | "
            "all-reduce ms | ckpt save ms | ckpt report ms | ckpt restore ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in result["scaling"]:

            def ms(k, r=r):
                v = r.get(k)
                return "-" if v is None else f"{1000 * v:.1f}"

            lines.append(
                f"| {r['workers']} | {r['queries_per_s']:.1f} | {r['speedup_vs_first']:.2f} | "
                f"{ms('step_s')} | {ms('forward_s')} | {ms('backward_s')} | "
                f"{ms('all_reduce_s')} | {ms('checkpoint_save_s')} | "
                f"{ms('checkpoint_report_s')} | {ms('checkpoint_restore_s')} |"
            )
        lines += [
            "",
            "Medians over repeats; per-step times are rank 0's means.  backward "
            "includes the all-reduce it overlaps with.",
        ]
    if result.get("biokg_checkpoint"):
        b = result["biokg_checkpoint"]
        lines += [
            "",
            "## biokg checkpoint (conf/biokg.yaml model, 51 relations)",
            "",
            f"- parameters: {b['parameters']:,}",
            f"- checkpoint size: {b['checkpoint_bytes'] / 2**20:.2f} MiB (model, Adam "
            "state, best weights, RNG, sampler, config)",
            f"- save: {1000 * b['save_s']:.1f} ms, restore (verify sha256 + load + "
            f"load_state_dict): {1000 * b['restore_s']:.1f} ms (median of {b['repeats']})",
        ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    p = make_parser(__doc__, __file__)
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--batch", type=int, default=16, help="global batch (queries)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--entities", type=int, default=1000, help="rule_kg size")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--use-gpu", action="store_true")
    p.add_argument("--cpus-per-worker", type=float, default=1.0)
    p.add_argument("--address", default=None, help="Ray address (default: a local Ray)")
    p.add_argument("--no-biokg", dest="biokg", action="store_false")
    p.add_argument("--out", default="scaling")
    args = p.parse_args()

    from cmpnn_dist.convert import build_dataset

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "setup": (
            f"synthetic:rule_kg {args.entities} entities, {args.layers} layers x "
            f"{args.hidden}, global batch {args.batch}, 32 negatives, {args.steps} "
            f"steps, checkpoint every {args.every}, repeats {args.repeats}"
        ),
    }
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cmpnn-scaling-") as tmp:
        work = Path(tmp)
        if args.workers:
            dataset = build_dataset(
                "synthetic:rule_kg",
                work / "data",
                synthetic={"num_entities": args.entities},
                name="scaling",
            )
            result["scaling"] = run_scaling(args, dataset, work)
    # the machine may be shared: the 1-minute load average tells how busy it was
    result["load_average_1min"] = {"start": load_before[0], "end": os.getloadavg()[0]}
    if args.biokg:
        result["biokg_checkpoint"] = biokg_checkpoint(args.repeats)
        print(json.dumps(result["biokg_checkpoint"]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1))
    write_markdown(result, RESULTS / f"{args.out}.md")
    print((RESULTS / f"{args.out}.md").read_text())


if __name__ == "__main__":
    main()
