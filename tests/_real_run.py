"""One tiny real training run, shared by the tests that read what a run writes.

Readers (``report``, ``evaluate``, ``predict``, the sweep report) are tested on the folder a
real run produced, never on a hand-made file, so a new column or file in a run folder cannot
break a reader silently.  :func:`train_tiny` trains the built-in rule-planted KG with a very
small model (300 entities, 2 layers x 8, 20 steps, a checkpoint every 10): a few seconds on
one CPU thread.  The session fixtures in ``conftest.py`` call it once with a local storage
root and once with a ``file://`` URI root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    from cmpnn_dist.cli import compose_config
    from cmpnn_dist.train import train

    argv = [f"storage_root={storage_root}", f"run_name={run_name}", *TINY, *(extra or [])]
    cfg = compose_config("default", argv)
    return train(cfg, argv)


def run_files(folder: Path) -> set[str]:
    """Relative names of a run folder's files (TensorBoard event names vary: one name)."""
    out = set()
    for p in Path(folder).rglob("*"):
        if p.is_file():
            rel = p.relative_to(folder).as_posix()
            out.add("tensorboard/events" if rel.startswith("tensorboard/") else rel)
    return out
