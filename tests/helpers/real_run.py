"""One tiny real training run, shared by the tests that read what a run writes.

Readers (``report``, ``evaluate``, ``predict``, the sweep report) are tested on the folder a
real run produced, never on a hand-made file, so a new column or file in a run folder cannot
break a reader silently.  :func:`train_tiny` trains the built-in rule-planted KG with a very
small model (300 entities, 2 layers x 8, 20 steps, a checkpoint every 10): a few seconds on
one CPU thread.  The session fixtures in ``conftest.py`` call it once with a local storage
root and once with a ``file://`` URI root.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers.paths import REPO_ROOT as REPO

TINY = [
    "data.name=rk300",
    "+data.synthetic.num_entities=300",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "ops.impl=reference",
    "train.batch_size=16",
    "train.max_steps=20",
    "train.num_negatives=8",
    "train.deterministic=true",
    "train.device=cpu",
    "train.progress=false",
    "checkpoint.every_steps=10",
    "eval.batch_size=64",
]


def train_tiny(storage_root: str, run_name: str = "tiny", extra: list[str] | None = None) -> Any:
    """Train the tiny run in this process through the CLI's own entry; returns its summary."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.cli.train import train

    argv = [f"storage_root={storage_root}", f"run_name={run_name}", *TINY, *(extra or [])]
    cfg = compose_config("default", argv)
    return train(cfg, argv)


def history(run_dir: Path) -> list[dict[str, str]]:
    """A run folder's ``metrics.csv`` rows without the wall-clock column ``time_s`` (what two
    runs of the same command must agree on)."""
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "time_s"} for row in csv.DictReader(f)]


def logged_train_steps(run_dir: Path) -> list[int]:
    """The steps of the ``train`` rows in a run folder's ``metrics.csv`` (none yet: [])."""
    try:
        rows = (Path(run_dir) / "metrics.csv").read_text().splitlines()[1:]
    except OSError:
        return []
    return [int(r.split(",")[1]) for r in rows if r.startswith("train,")]


def run_files(folder: Path) -> set[str]:
    """Relative names of a run folder's files (TensorBoard event names vary: one name)."""
    out = set()
    for p in Path(folder).rglob("*"):
        if p.is_file():
            rel = p.relative_to(folder).as_posix()
            out.add("tensorboard/events" if rel.startswith("tensorboard/") else rel)
    return out


INTERRUPT_CHILD = textwrap.dedent(
    """
    import os, sys
    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.train import _main
    from cmpnn_dist.training.trainer import Trainer

    signum, at = int(sys.argv[1]), int(sys.argv[2])
    step = Trainer.train_step

    def train_step(self, model):
        if self.step + 1 == at:
            os.kill(os.getpid(), signum)  # arrives during step `at`
        return step(self, model)

    Trainer.train_step = train_step
    sys.exit(run_cli(_main, sys.argv[3:]))
    """
)


def interrupt_tiny(cwd: Path, storage_root: str, signum: int, at: int) -> Any:
    """The tiny run through the CLI in a child process that receives a real ``signum``
    (SIGINT = Ctrl-C, SIGTERM) from inside training step ``at``."""
    argv = [f"storage_root={storage_root}", "run_name=tiny", *TINY]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", INTERRUPT_CHILD, str(signum), str(at), *argv],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )  # fmt: skip


def hold_lock(run: Path, then: str = "time.sleep(600)") -> subprocess.Popen:
    """A child process that takes the lock of run folder ``run`` (the product's ``RunLock``),
    says so, then runs the Python statement ``then`` (``""``: it exits holding the lock, as
    a run killed with SIGKILL leaves it).  The caller kills it."""
    code = (
        "import sys, time; from cmpnn_dist.runs.folder import RunLock; "
        f"RunLock(sys.argv[1]).acquire(); print('locked', flush=True); {then}"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    return child
