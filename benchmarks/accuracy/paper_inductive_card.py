"""The inductive sweeps' unfinished cells on a lent GPU for a fixed time, without Ray.

A lent card (the ``device`` tool: one H200 for a few minutes, no Ray, no network) cannot run
``paper_inductive.py run``, whose sweeps are Ray Tune trials.  ``train`` runs each unfinished
cell of those sweeps instead as its own ``python -m cmpnn_dist.train`` process, all at once
on the one GPU, with the overrides its Ray trial composes (:func:`cell_command`, as
``cmpnn_dist.distributed.tune_trials``) plus ``train.device=cuda ops.impl=auto``; so the cell's
folder, config and checkpoints are the ones ``run`` would have made.  After ``--seconds``
each gets SIGINT, checkpoints its step and exits 130 (a cell that finishes sooner exits 0).
The piece is recorded in the store like ``run``'s, its ``device`` the card's name, so
``pieces.json`` and the table's `ran on` say which steps the card took.

``pack`` writes what the cells need to go on elsewhere (the store's piece record, each cell's
logs and files: only its newest checkpoint and, of a finished cell, its best weights; no
TensorBoard files; ``metrics.csv`` without its training rows) as one tar in parts of at most
15 MiB (the tool returns at most 16 MiB a file); ``unpack``, here, puts the cells into a
store where they are newer, then ``run`` (or ``save``) goes on from them.
``python -m benchmarks.device.call --plan cells`` is the device call.

    python -m benchmarks.accuracy.paper_inductive_card train --storage STORE --seconds 450 \\
        [key=value ...]
    python -m benchmarks.accuracy.paper_inductive_card pack --storage STORE --out DIR
    python -m benchmarks.accuracy.paper_inductive_card unpack --storage STORE DIR/cells.tgz.part*
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks.accuracy import paper_inductive as sweeps
from benchmarks.harness.args import make_parser

HERE = Path(__file__).resolve().parent

PART = 15 * 2**20
ON_CARD = ("train.device=cuda", "ops.impl=auto")
# a cell whose first process fails on the card (the fused kernels, say) runs once more with
REFERENCE = "ops.impl=reference"


def cell_overrides(
    run: str, storage: Path, extra: list[str] | tuple[str, ...] = ()
) -> tuple[str, list[str]]:
    """``(preset, overrides)`` of cell ``run`` (``<sweep>/<cell id>``): those its Ray Tune
    trial composes (``cmpnn_dist.distributed.tune_trials.run_sweep``), then ``extra``."""
    from cmpnn_dist.cli.common import split_args
    from cmpnn_dist.runs.sweep import expand

    sweep = run.split("/", 1)[0]
    special, over = split_args(sweeps.sweep_overrides(sweep, storage), ["conf", "sweep_name"])
    fixed, grid = expand(over)
    (cell,) = [c for c in grid if f"{sweep}/{c.cell_id}" == run]
    fixed = [o for o in fixed if not o.startswith("storage_root=")]
    return special["conf"], [
        *fixed, *cell.overrides, f"storage_root='{storage}'", f"run_name='{run}'",
        "train.progress=false", "resume=true", *extra,
    ]  # fmt: skip


def cell_command(run: str, storage: Path, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Cell ``run``'s own command line (:func:`cell_overrides`)."""
    preset, over = cell_overrides(run, storage, extra)
    return [sys.executable, "-m", "cmpnn_dist.train", f"conf={preset}", *over]


def train(
    storage: Path, seconds: float, extra: list[str], device: str | None, grace: float = 60.0
) -> dict[str, int]:
    """Restore the archive into ``storage``, run every unfinished cell at once for
    ``seconds``, then stop them (SIGINT; SIGKILL for one still running ``grace`` seconds
    later, which then keeps its last periodic checkpoint); returns each cell's exit status."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset

    print(f"restored: {sweeps.restore(storage) or 'nothing'}", flush=True)
    todo = [n for n in sweeps.run_names() if not (storage / "runs" / n / "results.json").is_file()]
    sweeps.start_piece(storage, todo, device=device)
    cmds = {n: cell_command(n, storage, extra) for n in todo}
    built: set[str] = set()
    for n in todo:  # each dataset once, before the cells that share it start
        cfg = compose_config(*cell_overrides(n, storage, extra))
        if cfg.data.name not in built:
            ensure_dataset(cfg, progress=False)
            built.add(cfg.data.name)
    logs = storage / "card_logs"
    logs.mkdir(exist_ok=True)

    def start(n: str, cmd: list[str]) -> subprocess.Popen:
        log = open(logs / (n.replace("/", "__") + ".log"), "a")  # noqa: SIM115
        print(f"{n}: from step {sweeps._step(storage / 'runs' / n)}: {cmd[3:]}", flush=True)
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    procs = {n: start(n, cmd) for n, cmd in cmds.items()}
    retried: set[str] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for n, p in procs.items():  # a cell the fused kernels fail: once more, without them
            if p.poll() not in (None, 0, 130) and n not in retried and "ops.impl=auto" in cmds[n]:
                retried.add(n)
                procs[n] = start(n, [o.replace("ops.impl=auto", REFERENCE) for o in cmds[n]])
        if all(p.poll() is not None for p in procs.values()):
            break
        time.sleep(1.0)
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)  # the cell checkpoints its step and exits 130
    status = {}
    for n, p in procs.items():
        try:
            status[n] = p.wait(timeout=grace)
        except subprocess.TimeoutExpired:  # never expected; the last checkpoint still holds
            p.kill()
            status[n] = p.wait()
    for n, rc in status.items():
        print(f"{n}: exit {rc}, step {sweeps._step(storage / 'runs' / n)}", flush=True)
    return status


def _members(storage: Path) -> list[Path]:
    """The files ``pack`` takes: the piece record, the logs, and each cell the last piece
    trained, without the checkpoints a resumed cell or ``save`` does not read."""
    from cmpnn_dist.runs.checkpoint_store import CheckpointStore

    files = [storage / sweeps.PIECE, *sorted((storage / "card_logs").glob("*.log"))]
    for name in sweeps._store_pieces(storage)[-1]["from_step"]:
        run = storage / "runs" / name
        finished = (run / "results.json").is_file()
        found = CheckpointStore(run).find_latest()
        for f in sorted(p for p in run.rglob("*") if p.is_file()):
            parts = f.relative_to(run).parts
            if parts[0] == "tensorboard":  # megabytes; a resumed run writes its own
                continue
            if parts[0] == "checkpoints" and len(parts) > 2:
                keep = (finished and parts[1] == "best") or (found and parts[1] == found.path.name)
                if not keep:
                    continue
            files.append(f)
    return files


def pack(storage: Path, out: Path, part: int = PART) -> list[Path]:
    """The cells the last piece trained, as ``out/cells.tgz.partNN`` (each at most ``part``
    bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for f in _members(storage):
            if f.name == "metrics.csv":  # its validation and test rows: a resumed run writes
                # the training rows again from its checkpoint, ``save`` reads the others
                rows = sweeps.epoch_rows(f).encode()
                info = tar.gettarinfo(f, arcname=str(f.relative_to(storage)))
                info.size = len(rows)
                tar.addfile(info, io.BytesIO(rows))
            else:
                tar.add(f, arcname=str(f.relative_to(storage)))
    data, written = buf.getvalue(), []
    out.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(data), part):
        path = out / f"cells.tgz.part{i // part:02d}"
        path.with_suffix(".tmp").write_bytes(data[i : i + part])
        path.with_suffix(".tmp").rename(path)
        written.append(path)
    return written


def unpack(storage: Path, parts: list[Path]) -> list[str]:
    """Put the packed cells into ``storage`` where the store has none, an older one, or an
    unfinished one of a finished packed cell; the packed pieces join the store's record.
    Returns the cells put in."""
    stage = storage / ".card_unpack"
    shutil.rmtree(stage, ignore_errors=True)
    data = b"".join(p.read_bytes() for p in sorted(parts))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(stage, filter="data")
    put = []
    for name in sweeps._store_pieces(stage)[-1]["from_step"]:
        src, dst = stage / "runs" / name, storage / "runs" / name
        newer = (src / "results.json").is_file() or sweeps._step(src) > sweeps._step(dst)
        if src.is_dir() and not (dst / "results.json").is_file() and newer:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(dst, ignore_errors=True)
            src.rename(dst)
            put.append(name)
    known = sweeps._store_pieces(storage)
    new = [p for p in sweeps._store_pieces(stage) if p not in known]
    sweeps.write_atomic(storage / sweeps.PIECE, json.dumps([*known, *new], indent=1))
    shutil.rmtree(stage)
    return put


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("action", choices=["train", "pack", "unpack"])
    p.add_argument("--storage", required=True, help="the sweeps' storage_root")
    p.add_argument("--seconds", type=float, default=450.0, help="train: how long")
    p.add_argument("--device", default="cuda", help="train: cuda, or cpu to try it here")
    p.add_argument("--out", help="pack: the folder for the parts")
    p.add_argument("rest", nargs="*", help="train: extra overrides; unpack: the parts")
    args = p.parse_intermixed_args(argv)
    storage = Path(args.storage).resolve()
    if args.action == "train":
        import torch

        if args.device == "cuda":
            extra, device = [*ON_CARD, *args.rest], f"{torch.cuda.get_device_name()} (GPU)"
        else:
            extra, device = ["train.device=cpu", *args.rest], None
        status = train(storage, args.seconds, extra, device)
        return 0 if all(rc in (0, 130) for rc in status.values()) else 1
    if args.action == "pack":
        if not args.out:
            p.error("pack needs --out")
        print("\n".join(map(str, pack(storage, Path(args.out)))))
        return 0
    print(f"put in: {unpack(storage, [Path(x) for x in args.rest]) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
