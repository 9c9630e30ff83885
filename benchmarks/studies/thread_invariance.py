"""Which ops of one training step give other floats with 2 intra-op threads than with 1.

For each configuration (a preset and overrides) one training step (sample, edge mask, forward,
loss, backward, Adam) runs twice from the same state: with 1 thread, recording every op's
outputs (a ``TorchDispatchMode``: aten ops and the compiled kernel's ``cmpnn_cpu`` ops), then
with 2 threads, comparing each op's outputs with the recording and replacing them by it, so
that every later op gets the same inputs.  An op listed therefore differs by itself, given
identical inputs.  Views and fresh uninitialised tensors are not compared.

    python -m benchmarks.studies.thread_invariance                      # the configurations below
    python -m benchmarks.studies.thread_invariance --configs "default model.aggregate=pna"

Writes benchmarks/results/studies/thread_invariance_cpu.md.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import os
import platform
import shlex
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import command_line, cpu_model, git_commit
from benchmarks.harness.results import results_dir, write_atomic

REPO = Path(__file__).resolve().parents[2]


CONFIGS = (
    "default",
    "default train.batch_size=64",
    "default model.aggregate=pna",
    "default model.readout=relation",
    "default model.readout=sum",
    "default model.message=2",
    "default model.propagation=pruned",
    "fb237_ind_v1",
    "default model.message=3",
    "default model.message=transe",
    "default ops.impl=reference",
)
VIEWS = {
    "slice", "view", "select", "as_strided", "expand", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "_unsafe_view", "alias", "unfold", "split", "split_with_sizes", "narrow",
    "diagonal", "unbind", "detach", "_reshape_alias",
}  # fmt: skip


class Tape(TorchDispatchMode):
    """Records every op's tensor outputs, or (``ref`` given) compares them with a recording
    and overwrites them with it."""

    def __init__(self, ref: list | None = None) -> None:
        super().__init__()
        self.ref, self.log, self.i = ref, [], 0
        self.differ: collections.Counter[str] = collections.Counter()
        self.max_diff: dict[str, float] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        flat = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        name = str(func)
        if self.ref is None:
            self.log.append((name, [t.detach().clone() for t in flat]))
            return out
        want_name, wants = self.ref[self.i]
        self.i += 1
        assert want_name == name, f"the two steps ran different ops: {want_name} / {name}"
        if "empty" in name or name.split(".")[1] in VIEWS:
            return out
        for got, want in zip(flat, wants, strict=True):
            same = got.shape == want.shape and torch.equal(got, want)
            if not same and got.is_floating_point():
                same = torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            if not same:
                self.differ[name] += 1
                d = (got.double() - want.double()).abs().max().item()
                self.max_diff[name] = max(self.max_diff.get(name, 0.0), d)
                with torch.no_grad():
                    got.copy_(want)
        return out


def probe(spec: str, store: str) -> tuple[int, dict[str, tuple[int, float]], str]:
    """(ops recorded, {op: (outputs that differ, max abs difference)}, why not invariant)."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.convert.prepare import ensure_dataset
    from cmpnn_dist.training.context import LocalContext
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.reproducibility import thread_invariant
    from cmpnn_dist.training.rng import seed_everything
    from cmpnn_dist.training.trainer import Trainer

    preset, *overrides = shlex.split(spec)
    cfg = compose_config(preset, [*overrides, "train.progress=false"])
    cfg.storage_root, cfg.data_root = store, str(REPO.parent / "shared" / "data")
    data = load_train_data(ensure_dataset(cfg, progress=False), cfg.eval.filter)
    with tempfile.TemporaryDirectory() as tmp:
        seed_everything(0)
        trainer = Trainer(cfg, data, LocalContext(tmp, tensorboard=False, announce=False), None)
        tr = trainer
        start = copy.deepcopy(
            (tr.sampler.state_dict(), tr.model.state_dict(), tr.optimizer.state_dict())
        )

        def step(mode: contextlib.AbstractContextManager) -> None:
            seed_everything(0)
            trainer.sampler.load_state_dict(copy.deepcopy(start[0]))
            trainer.model.load_state_dict(start[1])
            trainer.optimizer.load_state_dict(copy.deepcopy(start[2]))
            with mode:
                trainer.train_step(trainer.model)

        step(contextlib.nullcontext())  # builds the graph's caches outside the recording
        torch.set_num_threads(1)
        rec = Tape()
        step(rec)
        torch.set_num_threads(2)
        rep = Tape(rec.log)
        step(rep)
    found = {k: (v, rep.max_diff[k]) for k, v in rep.differ.most_common()}
    return len(rec.log), found, thread_invariant(cfg)[1]


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--store", default="/tmp/seed_bench_store", help="datasets' storage root")
    args = ap.parse_args()
    before = torch.get_num_threads()
    rows = []
    for spec in args.configs:
        n, found, why = probe(spec, args.store)
        ops = "; ".join(f"`{k}` ({c} outputs, max diff {d:.2g})" for k, (c, d) in found.items())
        rows.append(f"| `{spec}` | {n} | {ops or 'none'} | {why or 'yes'} |")
        print(rows[-1], flush=True)
    torch.set_num_threads(before)
    text = [
        "# Ops of a training step whose floats change between 1 and 2 threads",
        "",
        f"command: `{command_line(__file__, sys.argv[1:])}`  ",
        f"commit: `{git_commit(mark_dirty=True)}`  ",
        f"date: {datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}  ",
        f"machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}",
        "",
        "One training step from the same state with 1 thread (recorded) and 2 threads (each op "
        "compared with the recording given the recorded inputs).  Last column: the run's "
        "`reproducibility.thread_invariant` (`yes`) or why not.",
        "",
        "| configuration | ops | ops that differ | thread-invariant run |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
    write_atomic(results_dir(__file__) / "thread_invariance_cpu.md", "\n".join(text))


if __name__ == "__main__":
    main()
