"""Ranking of one split during training (validation each epoch, test at the end) and in
``python -m cmpnn_dist.evaluate``: the protocol, tie rule and sharding come from the config
and the context (every rank ranks its share; the gathered result is the same everywhere)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from .data import SplitData
from .rng import isolated_rng


def evaluate_split(
    model: nn.Module,
    split: SplitData,
    graph: Any,
    cfg: Any,
    num_relations: int,
    ctx: Any = None,
    ranks_dir: Path | None = None,
    progress: bool | None = None,
    split_name: str = "split",
) -> dict[str, Any]:
    """Ranking metrics of ``split`` (both directions, the first ``eval.max_queries`` facts,
    ``eval.protocol`` and ``eval.ties``) with ``model`` in eval mode; global RNG states are
    left untouched.

    Args:
        ctx: a context with ``rank``, ``world_size`` and (when ``world_size > 1``)
            ``all_gather_rows(t [n, c]) -> [sum n, c]``; None: one process.
        ranks_dir: write the per-query ranks to ``ranks_<split_name>_<protocol>.parquet``
            in this folder (main rank), if given.
        progress: progress bar (default: ``train.progress`` on the main rank).

    Returns: float metrics plus ``num_queries``, ``protocol`` and ``ties``.
    """
    from cmpnn_dist.evaluation import evaluate, pair_accuracy

    rank = int(getattr(ctx, "rank", 0)) if ctx is not None else 0
    world = int(getattr(ctx, "world_size", 1)) if ctx is not None else 1
    gather = getattr(ctx, "all_gather_rows", None) if world > 1 else None
    if progress is None:
        progress = bool(cfg.train.progress) and rank == 0
    ev = cfg.eval
    protocol, ties = _choice(ev, "protocol", "all"), _choice(ev, "ties", "pessimistic")
    was_training = model.training
    model.eval()
    try:
        with isolated_rng(), torch.no_grad():
            metrics = evaluate(
                model,
                graph,
                split.queries,
                split.filter_triples,
                num_relations=num_relations,
                batch_size=ev.batch_size,
                max_queries=ev.max_queries,
                num_negatives_hits=ev.num_negatives_hits,
                hits_negatives_rule=_choice(ev, "hits_negatives_rule", "paper"),
                protocol=protocol,
                ties=ties,
                node_types=split.node_types,
                negatives=split.negatives,
                rank=rank,
                world_size=world,
                gather=gather,
                progress=progress,
                ranks_path=(
                    Path(ranks_dir) / f"ranks_{split_name}_{protocol}.parquet"
                    if ranks_dir is not None and rank == 0
                    else None
                ),
            )
            if split.labeled_negatives is not None and len(split.labeled_negatives):
                metrics.update(
                    pair_accuracy(
                        model,
                        graph,
                        split.queries,
                        split.labeled_negatives,
                        batch_size=cfg.eval.batch_size,
                    )
                )
    finally:
        model.train(was_training)
    if _choice(ev, "filter", "all") != "all":  # named only when it is not the default
        metrics["filter"] = _choice(ev, "filter", "all")
    return {k: (v if isinstance(v, str) else float(v)) for k, v in metrics.items()}


def _choice(section: Any, key: str, default: str) -> str:
    value = getattr(section, key, default)
    return str(getattr(value, "value", value))  # plain str or a str Enum


def check_eval_options(cfg: Any, data: Any) -> None:
    """Raise ConfigError (a ValueError; one ``error:`` line in the CLIs) naming the key when
    ``eval.protocol`` / ``eval.ties`` / ``train.negatives`` is unknown or the data cannot serve
    it (``typed`` without node types, ``ogb`` without OGB's official negatives); called before
    any work starts."""
    from cmpnn_dist.config import ConfigError
    from cmpnn_dist.evaluation import protocols
    from cmpnn_dist.evaluation.metrics import TIES

    from .sampler import NEGATIVE_MODES

    protocol, ties = _choice(cfg.eval, "protocol", "all"), _choice(cfg.eval, "ties", "pessimistic")
    negatives = _choice(cfg.train, "negatives", "typed")
    for key, value, choices in (
        ("eval.protocol", protocol, protocols.names()),
        ("eval.ties", ties, TIES),
        ("train.negatives", negatives, NEGATIVE_MODES),
    ):
        if value not in choices:
            raise ConfigError(f"bad value {value!r} for {key}; choose one of {list(choices)}")
    proto = protocols.resolve(protocol)
    for split in (getattr(data, s) for s in cfg.eval.splits if hasattr(data, s)):
        try:  # can this dataset serve the protocol (typed: node types; ogb: its negatives)?
            proto.check(split.node_types, split.negatives, len(split.queries))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def evaluate_splits(
    model: nn.Module,
    data: Any,
    cfg: Any,
    device: torch.device,
    ctx: Any = None,
    ranks_dir: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """``{split: metrics}`` for ``valid`` and ``test`` (``{}`` for an empty split)."""
    model.to(device)
    out: dict[str, dict[str, Any]] = {}
    for name in ("valid", "test"):
        split = getattr(data, name)
        if len(split.queries) == 0:
            out[name] = {}
            continue
        out[name] = evaluate_split(
            model,
            split,
            split.graph.to(device),
            cfg,
            data.num_relations,
            ctx=ctx,
            ranks_dir=ranks_dir,
            split_name=name,
        )
    return out
