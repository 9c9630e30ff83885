"""End to end on one CUDA card (issue 24, items 2 and 3): the real ``python -m cmpnn_dist.train``
on the card against the CPU reference path of the same seed, bf16 against fp32, and a SIGKILL
mid-run with resume on the card.

Runs (each a fresh ``python -m cmpnn_dist.train`` process, ``ops.impl=auto``: Triton's fused
kernels on CUDA, the vectorised reference path on the CPU):

* ``default`` (the README's first run) and ``conf=fb237_ind_v1`` (``--fb-steps`` steps) on the
  CPU (started first, in the background, ``--cpu-threads`` threads each) and on the card in
  fp32 and bf16;
* ``kill``: the default run on the card with ``train.deterministic=true`` and a checkpoint
  every 50 steps, SIGKILLed once its step-100 checkpoint exists, then started again with the
  same command (it resumes), against the same run left alone.

Reported (``gpu_e2e_<card>.json`` / ``.md``): per run its wall time, training queries/s
(from ``metrics.csv``'s ``time_s``), final loss and test metrics; the CUDA-vs-CPU loss curves
compared as means over windows of 50 steps (relative difference; single steps differ by float
noise that compounds, windows do not) and the test metrics' differences; bf16 vs fp32 the
same way; the killed run's loss per step after the resume against the uninterrupted run
(bit-identical or the largest difference) and its test metrics.

    OUT=/tmp/e2e python -m benchmarks.step.gpu_e2e --data-root .gpu/data
    python -m benchmarks.step.gpu_e2e --data-root .gpu/data --runs cuda_default cuda_default_bf16

``--runs`` picks runs by name (default: all); comparisons and the resume check are reported
where both of their runs were picked.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import child_command, command_line
from benchmarks.harness.results import results_dir

ROOT = Path(__file__).resolve().parents[2]
TRAIN = [sys.executable, "-m", "cmpnn_dist.train"]
WINDOW = 50
RUNS = (
    "cuda_default",
    "cuda_fb237",
    "cuda_det",
    "cuda_killed",
    "cuda_default_bf16",
    "cuda_fb237_bf16",
    "cpu_default",
    "cpu_fb237",
)


def start(name: str, args: list[str], store: Path, log_dir: Path) -> tuple[subprocess.Popen, float]:
    cmd = [*TRAIN, *args, f"storage_root={store}", f"run_name={name}", "train.progress=false"]
    log = open(log_dir / f"{name}.log", "a")  # noqa: SIM115 (closed with the process)
    log.write(f"$ {child_command(cmd)}\n")
    log.flush()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    return proc, time.perf_counter()


def finish(
    name: str, proc: subprocess.Popen, t0: float, store: Path, log_dir: Path, timeout: float
) -> dict:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    wall = time.perf_counter() - t0
    run_dir = store / "runs" / name
    row: dict = {"run": name, "rc": rc, "wall_s": round(wall, 1)}
    text = (log_dir / f"{name}.log").read_text(errors="replace")
    m = re.search(r"(\d+) steps of (\d+) queries on (\w+)", text)
    if m:
        row.update(steps=int(m[1]), batch=int(m[2]), device=m[3])
    if (run_dir / "results.json").is_file():
        res = json.loads((run_dir / "results.json").read_text())
        row["test"] = {k: v for k, v in res.get("test", {}).items() if isinstance(v, float)}
        row["resumed_from_step"] = res.get("resumed_from_step")
    losses = read_losses(run_dir / "metrics.csv")
    row["loss"] = losses
    if losses and "batch" in row:
        times = read_times(run_dir / "metrics.csv")
        # the rows since the clock last went back, if it ever did
        cut = max([i for i in range(1, len(times)) if times[i][1] < times[i - 1][1]] or [0])
        (s0, t_0), (s1, t_1) = times[cut], times[-1]
        if t_1 > t_0:
            row["train_queries_per_s"] = round((s1 - s0) * row["batch"] / (t_1 - t_0), 1)
    row["final_loss"] = losses[max(losses)] if losses else None
    if rc != 0:
        row["log_tail"] = text[-1500:]
    print(json.dumps({k: v for k, v in row.items() if k not in ("loss", "log_tail")}), flush=True)
    return row


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] == "train"]


def read_losses(path: Path) -> dict[int, float]:
    return {int(r["step"]): float(r["loss"]) for r in read_rows(path)}


def read_times(path: Path) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r["time_s"])) for r in read_rows(path) if r["time_s"]]


def windows(loss: dict[int, float]) -> list[float]:
    steps = sorted(loss)
    return [
        sum(loss[s] for s in steps[i : i + WINDOW]) / len(steps[i : i + WINDOW])
        for i in range(0, len(steps) - WINDOW + 1, WINDOW)
    ]


def compare(a: dict, b: dict) -> dict:
    """b against a: windowed loss relative differences and test-metric differences."""
    wa, wb = windows(a.get("loss", {})), windows(b.get("loss", {}))
    rel = [abs(y - x) / abs(x) for x, y in zip(wa, wb, strict=False) if x]
    ta, tb = a.get("test", {}), b.get("test", {})
    return {
        "runs": f"{b['run']} vs {a['run']}",
        "loss_windows": [[round(x, 4), round(y, 4)] for x, y in zip(wa, wb, strict=False)],
        "max_rel_window_diff": round(max(rel), 4) if rel else None,
        "test_diff": {
            k: round(tb[k] - ta[k], 4) for k in ("mrr", "hits@1", "hits@10") if k in ta and k in tb
        },
    }


def kill_and_resume(args: list[str], store: Path, log_dir: Path, at_step: int) -> dict:
    name = "cuda_killed"
    proc, t0 = start(name, args, store, log_dir)
    ckpt = store / "runs" / name / "checkpoints" / f"step_{at_step:08d}"
    deadline = time.time() + 240
    while not (ckpt / "manifest.json").is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    killed_at = max(read_losses(store / "runs" / name / "metrics.csv") or {0: 0})
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    print(
        f"SIGKILL at step ~{killed_at} (checkpoint step {at_step} present: {ckpt.is_dir()})",
        flush=True,
    )
    proc, t0 = start(name, args, store, log_dir)
    row = finish(name, proc, t0, store, log_dir, 300)
    row["killed_after_step"] = killed_at
    return row


def save_partial(out: Path, rows: dict) -> None:
    """The runs so far (a call cut short by its time limit still reports them)."""
    (out / "gpu_e2e_partial.json").write_text(json.dumps(rows, indent=1))


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--store", default="/tmp/cmpnn_gpu_e2e")
    ap.add_argument("--fb-steps", type=int, default=300)
    ap.add_argument("--cpu-threads", type=int, default=6)
    ap.add_argument("--default-steps", type=int, default=None, help="default: the preset's")
    ap.add_argument("--gpu-device", default="cuda", help="cpu only to check this script")
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=RUNS, help="default: all")
    ap.add_argument("--out", default=os.environ.get("OUT", str(results_dir(__file__))))
    a = ap.parse_args()
    out, store = Path(a.out), Path(a.store)
    log_dir = store / "logs"  # one log per run (the device returns at most 8 files)
    log_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    steps = [f"train.max_steps={a.default_steps}"] if a.default_steps else []
    fb = ["conf=fb237_ind_v1", f"data_root={a.data_root}", f"train.max_steps={a.fb_steps}"]
    cpu = ["train.device=cpu", f"train.num_threads={a.cpu_threads}"]
    cuda = [f"train.device={a.gpu_device}", "ops.impl=auto"]
    bf16 = [*cuda, "train.precision=bf16"]
    # the CPU references first, in the background, on the card machine's CPU cores
    background = {
        n: start(n, args, store, log_dir)
        for n, args in (("cpu_default", [*steps, *cpu]), ("cpu_fb237", [*fb, *cpu]))
        if n in a.runs
    }
    rows: dict = {}
    det = [*steps, *cuda, "train.deterministic=true", "checkpoint.every_steps=50"]
    # most wanted first: a call cut short by its time limit still has them (save_partial)
    for name, args in (
        ("cuda_default", [*steps, *cuda]),
        ("cuda_fb237", [*fb, *cuda]),
        ("cuda_det", det),
        ("cuda_killed", det),
        ("cuda_default_bf16", [*steps, *bf16]),
        ("cuda_fb237_bf16", [*fb, *bf16]),
    ):
        if name not in a.runs:
            continue
        if name == "cuda_killed":
            rows[name] = kill_and_resume(det, store, log_dir, at_step=100)
        else:
            rows[name] = finish(name, *start(name, args, store, log_dir), store, log_dir, 300)
        save_partial(out, rows)
    for name, (proc, t0) in background.items():
        rows[name] = finish(name, proc, t0, store, log_dir, 900)
    resume = None
    if "cuda_killed" in rows and "cuda_det" in rows:
        killed, whole = rows["cuda_killed"], rows["cuda_det"]
        after = [s for s in killed["loss"] if s > 100 and s in whole["loss"]]
        diffs = [abs(killed["loss"][s] - whole["loss"][s]) for s in after]
        resume = {
            "killed_after_step": killed.get("killed_after_step"),
            "resumed_from_step": killed.get("resumed_from_step"),
            "steps_compared": len(after),
            "bit_identical_loss": bool(after) and max(diffs) == 0.0,
            "max_abs_loss_diff": max(diffs) if diffs else None,
            "test_equal": killed.get("test") == whole.get("test"),
            "test_diff": compare(whole, killed)["test_diff"],
        }
    comparisons = [
        compare(rows[x], rows[y])
        for x, y in (
            ("cpu_default", "cuda_default"),
            ("cpu_fb237", "cuda_fb237"),
            ("cuda_default", "cuda_default_bf16"),
            ("cuda_fb237", "cuda_fb237_bf16"),
        )
        if x in rows and y in rows
    ]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    ).stdout.strip()
    import torch

    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
    tag = "h200" if "H200" in card else "h100" if "H100" in card else "gpu"
    result = {
        "benchmark": "gpu_e2e",
        "card": card,
        "torch": torch.__version__,
        "commit": commit,
        "command": command_line(__file__, sys.argv[1:]),
        "load_average": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "runs": rows,
        "comparisons": comparisons,
        "resume": resume,
    }
    (out / f"gpu_e2e_{tag}.json").write_text(json.dumps(result, indent=1))
    (out / "gpu_e2e_partial.json").unlink(missing_ok=True)
    lines = [
        f"# End to end on {card} (commit {commit})",
        "",
        "| run | device | steps x batch | wall s | train queries/s | final loss | test mrr "
        "| hits@10 | rc |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows.values():
        t = r.get("test", {})
        lines.append(
            f"| {r['run']} | {r.get('device')} | {r.get('steps')} x {r.get('batch')} "
            f"| {r['wall_s']} | {r.get('train_queries_per_s')} | "
            f"{r['final_loss'] and round(r['final_loss'], 4)} | "
            f"{t.get('mrr', float('nan')):.4f} | {t.get('hits@10', float('nan')):.4f} "
            f"| {r['rc']} |"
        )
    lines += [
        "",
        "| comparison | max rel. diff of 50-step loss means | test diff |",
        "|---|---|---|",
    ]
    lines += [
        f"| {c['runs']} | {c['max_rel_window_diff']} | {c['test_diff']} |" for c in comparisons
    ]
    if resume is not None:
        lines += ["", f"SIGKILL and resume on the card: {json.dumps(resume)}"]
    (out / f"gpu_e2e_{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
