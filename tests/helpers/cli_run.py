"""The CLI's two-worker Ray training the slow distributed tests run, interrupt and fault: its
overrides, a clean environment, and the driver's own lines of its output."""

from __future__ import annotations

import os
import re

MAX_STEPS = 24
EVERY = 4
ARGS = [
    "data.name=rk60",
    "+data.synthetic.num_entities=60",
    "model.num_layers=2",
    "model.hidden_dim=8",
    "model.decoder_hidden_dim=8",
    "ops.impl=reference",
    "train.batch_size=4",
    "train.num_negatives=8",
    f"train.max_steps={MAX_STEPS}",
    "train.deterministic=true",
    "train.device=cpu",
    "train.progress=false",
    "eval.max_queries=8",
    "eval.batch_size=8",
    f"checkpoint.every_steps={EVERY}",
    "cluster.num_workers=2",
    "cluster.collective_timeout_s=120",
]


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without Ray's and our own settings, one OpenMP thread, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


# a line Ray forwards from one of its actors' logs: "(TrainController pid=123) ...", coloured
RAY_ACTOR_LINE = re.compile(r"^(\x1b\[[0-9;]*m)?\(\w+ pid=\d+")


def driver_lines(output: str) -> str:
    """The driver's own output: without the lines Ray forwards from its actors (Ray Train's
    controller logs a traceback of its own when a resource request times out on a loaded
    machine; that is Ray's log, not an error the run reports)."""
    return "\n".join(ln for ln in output.splitlines() if not RAY_ACTOR_LINE.match(ln))
