"""Rebuild a trained model and its dataset from a checkpoint folder (as ``evaluate`` does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.config import Config
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.errors import UsageError


def load_model(
    path: str | Path, overrides: list[str], weights: str | None = None
) -> tuple[Any, Config, Any]:
    """-> ``(CMPNN with the chosen weights, Config, opened Dataset)``.

    ``path``: a checkpoint folder or a run folder (its newest valid checkpoint);
    ``weights``: ``best`` (by validation MRR, when the checkpoint holds it) or ``last``;
    None: a step folder's own, else best (:func:`~cmpnn_dist.runs.restore.default_weights`).
    """
    from cmpnn_dist.runs.restore import (
        default_weights,
        load_checkpoint_config,
        model_from_state,
    )
    from cmpnn_dist.storage import open_dataset

    weights = weights or default_weights(path)
    if weights not in ("best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    ckpt, state, cfg = load_checkpoint_config(path, overrides)
    ds = open_dataset(ensure_dataset(cfg))
    try:
        model = model_from_state(
            cfg, state, weights, int(ds.num_relations), ds.graph_data("train").num_nodes,
            bool(ds.inductive),
        )  # fmt: skip
    except ValueError as exc:
        raise UsageError(f"checkpoint {ckpt}: {exc}") from exc
    return model.eval(), cfg, ds
