"""One device call on a lent card: a plan of budgeted steps, packed after each.

    python -m benchmarks.device.call --plan session --budget 500 --out $OUT [--steps layer e2e]
    python -m benchmarks.device.call --plan session --print     # the commands, run nothing

Plans (``--steps`` picks some of a plan's steps, in the plan's order):

- ``session``: ``tests`` (every ``gpu`` test and the fused-kernel file), ``layer`` (one layer at
  biokg scale: reference, fused, the torch.sparse floor, the output check), ``pruned`` (dense
  against node_ratio 0.005 at batch 8 and 64), ``e2e`` (the default run and fb237_ind_v1, fp32
  and bf16), ``profile`` (a pruned step's launches and host syncs), ``precision`` (bf16 against
  fp32), ``eval`` (evaluation throughput), ``step`` (the 6-layer training step), ``wikikg2``
  (pruned at wikikg2 scale, with what time is left);
- ``check``: the fused kernels' tests (first tiling, then a pipelined one), the layer with the
  whole tuning space autotuned, the fused profile and the training step;
- ``pruned``: ``tests``, ``profile`` and ``speed`` (dense, 0.02, 0.005 at batch 8);
- ``cells``: the inductive sweeps' unfinished cells, all at once for ``--train`` seconds
  (:mod:`benchmarks.accuracy.paper_inductive_card`), packed in parts the device tool returns.

Every step runs under ``timeout``: its own cap, or what is left of ``--budget`` less 15 s for
the packing.  After every step ``--out`` holds ``summary.txt`` (each step's exit status, time
and the lines of its log worth reading), the steps' Markdown tables, and everything else in one
archive (``call.tar.gz``).  The fused kernels' tuning space is cut to the tilings that won the
last full autotuning (``results/ops/fused_kernels_h200.md``), except for the ``check`` plan's
layer and the tests.  Python packages the card's image lacks travel in the ignored folder
``.gpu/`` (``.gpu/site/`` or ``.gpu/site.tgz``; the GraIL splits' raw files in ``.gpu/data/`` or
``.gpu/data.tgz``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.args import make_parser

# the six tilings that won the last full autotuning, in CMPNN_TRITON_CONFIGS's syntax
# "E,C,warps,stages,hints,prefetch;..." (cmpnn_dist/ops/triton_tuning.py)
TILINGS = "4,128,2,1,0,1;2,256,1,1,0,1;16,64,4,1,0,0;8,64,2,1,0,0;2,256,2,1,0,1;16,64,4,1,0,1"
PIPELINED = "16,64,4,3,1,0"  # a column-tiled, hinted, software-pipelined tiling
PACK_S = 15  # seconds kept back for the last packing
PY = "python"
GRAPH_CACHE = "/tmp/cmpnn_biokg_scale_csr.npz"  # the benchmarks' --graph-cache default
BUILD = ("import sys; from pathlib import Path; from benchmarks.harness.graphs import load_graph; "
         "load_graph(Path(sys.argv[1]))")  # fmt: skip


@dataclass(frozen=True)
class Step:
    """One command of a plan: ``cap`` seconds at most, its output in ``log``; the lines of the
    log matching ``show`` go to the summary; ``env`` is added to the call's environment."""

    name: str
    argv: tuple[str, ...]
    cap: int
    log: str
    show: str = r"^\|"
    env: dict[str, str] = field(default_factory=dict)
    tables: str = ""  # a glob of Markdown tables to copy to --out
    graph: bool = False  # reads the biokg-scale graph cache (built meanwhile, see Call.build)


def _m(module: str, *args: str) -> tuple[str, ...]:
    return (PY, "-m", module, *args)


def _pytest(*args: str) -> tuple[str, ...]:
    return (PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args)


def plan(name: str, work: str, train_s: int = 470) -> list[Step]:
    """The steps of plan ``name``, writing under ``work``."""
    tuned = {"CMPNN_TRITON_CONFIGS": TILINGS}
    no_tune = {"CMPNN_TRITON_AUTOTUNE": "0"}
    gpu_tests = Step("tests", _pytest("--continue-on-collection-errors", "-m", "gpu", "tests"),
                     100, "pytest_gpu.txt", r"passed|failed|error", no_tune)  # fmt: skip
    fused_tests = Step("tests", _pytest("tests/unit/ops/test_ops_fused.py"), 90,
                       "pytest_fused.txt", r"passed|failed|error", no_tune)  # fmt: skip

    def pruned_speed(b: int, ratios: tuple[str, ...], cap: int, graph: str = "biokg") -> Step:
        args = ("--graph", graph, "--device", "cuda", "--ratios", *ratios, "--rounds", "3",
                "--eval-rounds", "3", "--out", work, "--batch", str(b),
                "--eval-batch", str(max(b, 16)), "--label", f"{graph}-b{b}")  # fmt: skip
        log = f"pruned_{graph}_b{b}.log"
        return Step(f"{graph} B {b}", _m("benchmarks.pruned.pruned_speed", *args), cap, log,
                    rf"^{graph}", tuned, "pruned_speed_cuda.md")  # fmt: skip

    def profile(ratios: tuple[str, ...], cap: int) -> Step:
        args = ("--graph", "biokg", "--device", "cuda", "--ratios", *ratios, "--batch", "8",
                "--eval-batch", "16", "--out", work)  # fmt: skip
        return Step("profile", _m("benchmarks.pruned.pruned_profile", *args), cap, "profile.log",
                    r"^==|^host|^per |step .* ms, syncs", tuned)  # fmt: skip

    if name == "session":
        cases = ("msg1_sum_fp32", "msg1_sum_bf16", "msg1_pna_fp32")
        layer = ("--device", "cuda", "--reps", "20", "--cases", *cases, "--impls", "reference",
                 "fused", "sparse_floor", "--out", work)  # fmt: skip
        e2e = ("--data-root", ".gpu/data", "--out", work, "--runs", "cuda_default", "cuda_fb237",
               "cuda_default_bf16", "cuda_fb237_bf16")  # fmt: skip
        return [
            gpu_tests, fused_tests,
            Step("layer", _m("benchmarks.ops.message_passing", *layer), 80,
                 "message_passing.log", r"^\||copy", tuned, "message_passing_cuda_*.md", True),
            pruned_speed(8, ("dense", "0.005"), 60), pruned_speed(64, ("dense", "0.005"), 80),
            Step("e2e", _m("benchmarks.step.gpu_e2e", *e2e), 150, "e2e.log", r"^\{", tuned,
                 "gpu_e2e_*.md"),
            profile(("0.005", "dense"), 70),
            *[Step(f"precision B {b}", _m("benchmarks.step.gpu_precision", "--device", "cuda",
                   "--configs", *(("dense", "0.005") if b == 8 else ("dense",)), "--batch", str(b),
                   "--rounds", "5", "--out", f"{work}/precision_b{b}"), 60, f"precision_b{b}.log",
                   r"^\| [d0]", tuned) for b in (8, 64)],
            Step("eval", _m("benchmarks.step.eval_throughput", "--device", "cuda", "--impl",
                 "auto", "--facts", "512", "--batch", "64", "--threads", "8", "--out",
                 f"{work}/eval_throughput_cuda"), 90, "eval.log", r"^\|", tuned),
            Step("step", _m("benchmarks.step.train_step", "--device", "cuda", "--reps", "3",
                 "--impls", "fused", "reference", "--out", work), 70, "train_step.log", r"^\|",
                 tuned, "train_step_cuda_*.md", True),
            pruned_speed(8, ("0.002",), 400, graph="wikikg2"),
        ]  # fmt: skip
    if name == "check":
        layer = ("--device", "cuda", "--reps", "10", "--impls", "reference", "fused",
                 "sparse_floor", "--out", work)  # fmt: skip
        return [
            Step("tests", _pytest("tests", "-k", "test_ops_fused or gpu", "--durations=5"), 150,
                 "pytest_gpu.txt", r"passed|failed|error", no_tune),
            Step("tests pipelined", _pytest("tests/unit/ops/test_ops_fused.py", "-k",
                 "parity or gpu_"), 150, "pytest_pipelined.txt", r"passed|failed|error",
                 {"CMPNN_TRITON_CONFIGS": PIPELINED}),
            Step("layer autotuned", _m("benchmarks.ops.message_passing", *layer), 270,
                 "message_passing.log", r"^\||copy|FAILED", {"CMPNN_TRITON_PIPELINE": "1"},
                 "message_passing_cuda_*.md", True),
            Step("profile", _m("benchmarks.ops.profile_fused", "--out", work), 90,
                 "profile_fused.log", r"ms", tuned, graph=True),
            Step("step", _m("benchmarks.step.train_step", "--device", "cuda", "--reps", "5",
                 "--impls", "reference", "fused", "fused+graph", "--out", work), 150,
                 "train_step.log", r"^\|", tuned, "train_step_cuda_*.md", True),
        ]  # fmt: skip
    if name == "pruned":
        return [gpu_tests, profile(("dense", "0.02", "0.005"), 150),
                pruned_speed(8, ("dense", "0.02", "0.005"), 150)]  # fmt: skip
    if name == "cells":
        store = "/tmp/cmpnn_cells"
        card = "benchmarks.accuracy.paper_inductive_card"
        return [
            Step("train", _m(card, "train", "--storage", store, "--seconds", str(train_s),
                 "--device", "cuda", "data_root=.gpu/data", "train.num_threads=4"),
                 train_s + 60, "cells.log", r"cell|finished|steps", tuned),
            Step("pack", _m(card, "pack", "--storage", store, "--out", work), 60, "pack.log",
                 r"part|MiB"),
        ]  # fmt: skip
    raise SystemExit(f"no plan {name!r}: session, check, pruned or cells")


class Call:
    """Runs steps within ``budget`` seconds, logs in ``work``, packs into ``out`` after each."""

    def __init__(self, work: Path, out: Path, budget: float) -> None:
        self.work, self.out = work, out
        self.end = time.monotonic() + budget
        self.summary = work / "summary.txt"
        work.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)

    def build(self, cache: str, env: dict[str, str]) -> None:
        """Build the biokg-scale graph cache on the CPU cores while the first steps run."""
        log = (self.work / "build.log").open("w")
        cmd = [sys.executable, "-c", BUILD, cache]
        self.builder = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

    def wait_build(self) -> None:
        """Before a step that reads the graph: the build, for 120 s at the most."""
        builder = getattr(self, "builder", None)
        if builder is None:
            return
        try:
            rc = builder.wait(timeout=max(1, min(120, self.left())))
            self.note(f"graph cache built (rc={rc})")
        except subprocess.TimeoutExpired:
            self.note("graph cache still building: the step builds its own")
        self.builder = None

    def left(self) -> float:
        return self.end - time.monotonic() - PACK_S

    def note(self, line: str) -> None:
        print(line, flush=True)
        with self.summary.open("a") as f:
            f.write(line + "\n")

    def run(self, step: Step, env: dict[str, str]) -> int:
        if step.graph:
            self.wait_build()
        cap = max(1, int(min(step.cap, self.left())))
        self.note(
            f"== {step.name} {time.strftime('%H:%M:%S')} (cap {cap} s, {self.left():.0f} s left)"
        )
        t0 = time.monotonic()
        with (self.work / step.log).open("w") as log:
            try:
                rc = subprocess.run(list(step.argv), stdout=log, stderr=subprocess.STDOUT,
                                    env={**env, **step.env}, timeout=cap).returncode  # fmt: skip
            except subprocess.TimeoutExpired:
                rc = 124
        self.note(f"{step.name} rc={rc} ({time.monotonic() - t0:.0f} s)")
        shown = [ln for ln in (self.work / step.log).read_text(errors="replace").splitlines()
                 if re.search(step.show, ln)]  # fmt: skip
        for ln in shown[-16:]:
            self.note(ln[:240])
        self.pack(step)
        return rc

    def pack(self, step: Step | None = None) -> None:
        """The summary, the step's tables, and the whole work folder as one archive."""
        shutil.copy(self.summary, self.out / "summary.txt")
        if step is not None and step.tables:
            for table in self.work.glob(step.tables):
                shutil.copy(table, self.out / table.name)
        tmp = self.out / "call.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            for path in sorted(self.work.rglob("*")):
                if path.is_file() and path.suffix not in (".npz", ".tmp"):
                    tar.add(path, arcname=str(path.relative_to(self.work)))
        os.replace(tmp, self.out / "call.tar.gz")


def unpack_gpu_folder(repo: Path) -> str:
    """``PYTHONPATH`` entries for the packages travelling in ``.gpu/`` (unpacked if archived)."""
    gpu = repo / ".gpu"
    for name in ("site", "data"):
        archive = gpu / f"{name}.tgz"
        if archive.is_file() and not (gpu / name).is_dir():
            with tarfile.open(archive) as tar:
                tar.extractall(gpu / name, filter="data")
    return os.pathsep.join(str(p) for p in (repo, gpu / "site") if p.is_dir())


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--plan", default="session")
    p.add_argument("--steps", nargs="*", default=None, help="only these steps of the plan")
    p.add_argument("--budget", type=float, default=420, help="seconds for the whole call")
    p.add_argument("--train", type=int, default=470, help="cells: seconds of training")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/device_call")))
    p.add_argument("--work", type=Path, default=Path("/tmp/device_work"))
    p.add_argument("--print", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    steps = plan(args.plan, str(args.work), args.train)
    if args.steps:
        steps = [s for s in steps if s.name.split()[0] in args.steps]
    if args.print:
        for s in steps:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in s.env.items())
            print(f"# {s.name} (cap {s.cap} s)\n{env + ' ' if env else ''}timeout {s.cap} "
                  f"{shlex.join(s.argv)} > {args.work / s.log}")  # fmt: skip
        return 0
    repo = Path.cwd()
    path = unpack_gpu_folder(repo)
    path = os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TRITON_DEFAULT_FP_FUSION": "1",
        "PYTHONPATH": path,
    }
    call = Call(args.work, args.out, args.budget)
    probe = "import torch, sys; print(torch.__version__, torch.cuda.is_available() and " \
            "torch.cuda.get_device_name())"  # fmt: skip
    versions = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    call.note(f"plan {args.plan}: {versions.stdout.strip() or versions.stderr.strip()[-200:]}")
    if any(s.graph for s in steps) and not Path(GRAPH_CACHE).is_file():
        call.build(GRAPH_CACHE, env)
    failed = 0
    for step in steps:
        if call.left() < 2:
            call.note(f"== {step.name}: skipped, {call.left():.0f} s left")
            continue
        failed += call.run(step, env) != 0
    call.note(f"done: {len(steps) - failed} of {len(steps)} steps ended with status 0")
    call.pack()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
