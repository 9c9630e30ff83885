"""Rebuild a trained model and its dataset from a checkpoint folder (as ``evaluate`` does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.cli import UsageError, ensure_dataset
from cmpnn_dist.config import Config


def load_model(path: Path, overrides: list[str], weights: str = "best") -> tuple[Any, Config, Any]:
    """-> ``(CMPNN with the chosen weights, Config, opened Dataset)``.

    ``path``: a checkpoint folder or a run folder (its newest valid checkpoint);
    ``weights``: ``best`` (by validation MRR, when the checkpoint holds it) or ``last``.
    """
    from cmpnn_dist.evaluate import config_from_checkpoint, resolve_checkpoint
    from cmpnn_dist.model.build import build_model
    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.checkpoint import load_checkpoint

    if weights not in ("best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    if not path.exists():
        raise UsageError(f"checkpoint path {path} does not exist")
    ckpt = resolve_checkpoint(path)
    state = load_checkpoint(ckpt)
    cfg = config_from_checkpoint(state.get("config", {}), overrides)
    ds = open_dataset(ensure_dataset(cfg))
    try:
        model = build_model(
            cfg.model,
            cfg.ops,
            int(ds.num_relations),
            ds.graph_data("train").num_nodes,
            bool(ds.inductive),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    best = (state.get("best") or {}).get("state")
    params = best if (weights == "best" and best is not None) else state["model"]
    try:
        model.load_state_dict(params)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = "; ".join(line.strip() for line in first[1:4]) or first[0]
        raise UsageError(
            f"checkpoint {ckpt} does not fit the configured model "
            f"(was it written with another model configuration?): {detail}"
        ) from exc
    return model.eval(), cfg, ds
