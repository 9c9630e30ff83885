"""The small Ray Train runs the slow distributed tests start in-process (2 CPU workers on the
tiny synthetic graph), and how their results are compared."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from cmpnn_dist.config import Config
from cmpnn_dist.runs.checkpoint import load_checkpoint
from cmpnn_dist.runs.checkpoint_store import CheckpointStore

MAX_STEPS = 12
EVERY = 3


def make_cfg(root: Path, name: str, workers: int = 2, **cluster) -> Config:
    """A 2-layer, 8-dim run of ``MAX_STEPS`` steps on ``workers`` Ray workers, a checkpoint
    every ``EVERY`` steps; ``cluster`` overrides keys of ``cfg.cluster``."""
    cfg = Config()
    cfg.storage_root = str(root)
    cfg.run_name = name
    cfg.data.name = "tiny"
    cfg.model.num_layers = 2
    cfg.model.hidden_dim = 8
    cfg.model.decoder_hidden_dim = 8
    cfg.ops.impl = "reference"
    cfg.train.batch_size = 4
    cfg.train.num_negatives = 8
    cfg.train.max_steps = MAX_STEPS
    cfg.train.deterministic = True
    cfg.train.device = "cpu"
    cfg.train.progress = False
    cfg.eval.max_queries = 8
    cfg.eval.batch_size = 8
    cfg.checkpoint.every_steps = EVERY
    cfg.checkpoint.keep_last = 3
    cfg.cluster.num_workers = workers
    cfg.cluster.collective_timeout_s = 60.0
    cfg.cluster.max_failures = 1
    for key, value in cluster.items():
        setattr(cfg.cluster, key, value)
    return cfg


def checkpoint_candidates(run: str) -> list[tuple[int, str]]:
    """(step, folder) of the run's checkpoints, newest first."""
    return CheckpointStore(run).candidates()


def final_state(run_dir: str) -> dict:
    """The newest valid checkpoint of ``run_dir``, which must be the last step's."""
    found = CheckpointStore(run_dir, scratch=Path(tempfile.mkdtemp())).find_latest()
    assert found is not None, f"no valid checkpoint in {run_dir}"
    state = load_checkpoint(found.path)
    assert state["step"] == MAX_STEPS
    return state


def train_steps(history: list[dict]) -> list[int]:
    """The steps of the training rows of a history."""
    return [row["step"] for row in history if row.get("kind") == "train"]


def assert_bit_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"parameter {k} differs"
