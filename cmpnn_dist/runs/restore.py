"""Checkpoint restore: the one place that turns a saved checkpoint back into a config and a model.

``python -m cmpnn_dist.evaluate``, :mod:`cmpnn_dist.predict`, the Ray evaluation workers and
the trainer's resume all go through here:

* :func:`load_checkpoint_config` -- what evaluate and predict take, in one call: the checkpoint
  read whole (a checkpoint folder, or the newest complete one of a run folder; read-only, safe
  beside a live run: :mod:`~cmpnn_dist.runs.checkpoint_reader`), its state, the run's
  config with overrides;
* :func:`config_from_checkpoint` -- the run's saved config with overrides on top, validated;
* :func:`model_from_state` -- the configured model with the checkpoint's best / last weights
  (:func:`default_weights`: which, when the reader is not told);
* :func:`check_resumable` -- a checkpoint written by the same model on the same data (resume).

Errors a person must fix are :class:`~cmpnn_dist.errors.UsageError` (``config_from_checkpoint``,
``load_checkpoint_config``), ``ValueError`` (``model_from_state``: the caller names the checkpoint)
or :class:`~cmpnn_dist.runs.checkpoint.CheckpointError` (``check_resumable``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from cmpnn_dist.config import SAVED_CHOICE_NAMES, Config, ModelConfig, config_to_dict, validate
from cmpnn_dist.errors import UsageError

from .checkpoint import CheckpointError
from .checkpoint_store import CHECKPOINTS_DIR


def load_checkpoint_config(
    path: str | Path, overrides: list[str]
) -> tuple[str, dict[str, Any], Config]:
    """``(where the checkpoint was read, its state, the run's config with overrides)`` for a
    checkpoint folder, a run folder or its ``checkpoints`` folder (the newest complete
    checkpoint), local or a URI.  Read-only and safe beside the run writing that folder:
    :func:`~cmpnn_dist.runs.checkpoint_reader.read_checkpoint`."""
    from .checkpoint_reader import read_checkpoint

    loaded = read_checkpoint(path)
    return (
        loaded.location,
        loaded.state,
        config_from_checkpoint(loaded.state.get("config", {}), overrides),
    )


def default_weights(path: str | Path) -> str:
    """The weights a reader (``evaluate``, ``predict``, batch scoring) takes when
    ``weights=`` is not given: ``last`` (the checkpoint's own) for a step checkpoint folder
    named by its path (``.../checkpoints/step_N``), ``best`` (the best weights by valid MRR
    that the checkpoint carries) for ``best``, a run folder or its ``checkpoints`` folder."""
    from cmpnn_dist.storage import fs

    from .checkpoint import parse_checkpoint_name

    return "last" if parse_checkpoint_name(fs.name(fs.normalize(path))) is not None else "best"


def run_dir_of(ckpt: str | Path) -> str:
    """The run folder of checkpoint folder ``ckpt`` (``<run>/checkpoints/<name>``), as a local
    path or a URI string."""
    from cmpnn_dist.storage import fs

    parent = fs.normalize(ckpt).rsplit("/", 1)[0]
    return parent.rsplit("/", 1)[0] if fs.name(parent) == CHECKPOINTS_DIR else parent


def config_from_checkpoint(saved: dict[str, Any], overrides: list[str]) -> Config:
    """The run's saved config with ``overrides`` on top.  ``data.rebuild`` is a one-off request
    of the run that saved it, not a property of the model: it is not carried over.  An
    override's key must be one the schema declares (Hydra's ``+`` / ``++`` prefixes are
    accepted and mean the same as none here)."""
    saved = {**saved, "data": {k: v for k, v in saved.get("data", {}).items() if k != "rebuild"}}
    prune = saved.get("model", {}).get("prune")
    if isinstance(prune, dict) and "priority" not in prune:
        # saved before model.prune.priority existed: those runs had the separate priority MLP
        saved["model"] = {**saved["model"], "prune": {**prune, "priority": "mlp"}}
    saved = saved_choice_names(saved)
    from omegaconf import OmegaConf

    from cmpnn_dist.config.keys import check_override_keys

    check_override_keys(overrides)
    dotlist = [o.lstrip("+") for o in overrides]
    try:
        merged = OmegaConf.merge(
            OmegaConf.structured(Config), saved, OmegaConf.from_dotlist(dotlist)
        )
        cfg = OmegaConf.to_object(merged)
    except Exception as exc:
        raise UsageError(f"config error: {' '.join(str(exc).split())}") from exc
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def saved_choice_names(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a run config read from a checkpoint) with each choice value that
    :data:`~cmpnn_dist.config.SAVED_CHOICE_NAMES` renames replaced by today's name
    (``eval.hits_negatives_rule: torchdrug`` is ``nbfnet_pyg``, the rule those runs computed)."""
    for key, names in SAVED_CHOICE_NAMES.items():
        section, _, leaf = key.partition(".")
        values = saved.get(section)
        if isinstance(values, dict) and isinstance(values.get(leaf), str) and values[leaf] in names:
            saved = {**saved, section: {**values, leaf: names[values[leaf]]}}
    return saved


def model_from_state(
    cfg: Any, state: dict[str, Any], weights: str, num_relations: int, num_nodes: int,
    inductive: bool,
) -> nn.Module:  # fmt: skip
    """The model of ``cfg.model`` (:func:`~cmpnn_dist.model.build.build_model`) for a dataset of
    that size with a checkpoint's ``best`` weights (by valid MRR; the current ones when there
    are none or ``weights="last"``).  ValueError when they do not fit (``evaluate`` and
    ``predict`` both load through here)."""
    from cmpnn_dist.model.build import build_model  # the model layer, loaded when needed

    model = build_model(cfg.model, cfg.ops, num_relations, num_nodes, inductive)
    best = (state.get("best") or {}).get("state")
    params = best if (weights == "best" and best is not None) else state["model"]
    try:
        model.load_state_dict(params)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = "; ".join(line.strip() for line in first[1:4]) or first[0]
        raise ValueError(
            "the checkpoint does not fit the configured model "
            f"(was it written with another model configuration?): {detail}"
        ) from exc
    return model


def with_defaults(saved: Any, schema: Any) -> Any:
    """A config section as a checkpoint saved it, read with today's schema: a key the schema
    has gained since (a new option) holds its default, which is what the run trained with."""
    if not isinstance(saved, dict):
        return saved
    default = config_to_dict(schema) if not isinstance(schema, dict) else schema
    out = dict(saved)
    for key, value in default.items():
        if key not in out:
            out[key] = value
        elif isinstance(value, dict):
            out[key] = with_defaults(out[key], value)
    return out


def check_resumable(
    path: Path, state: dict[str, Any], model_config: Any, data_sizes: dict[str, int]
) -> None:
    """Raise CheckpointError unless checkpoint ``path`` (loaded as ``state``) was written for
    this run's ``model`` config section and data sizes (``num_nodes``, ``num_relations``,
    ``num_train_facts``): resuming it would otherwise load mismatched weights."""
    saved_model = with_defaults(state.get("config", {}).get("model"), ModelConfig())
    if saved_model != model_config:
        raise CheckpointError(
            f"{path}: written for model config {saved_model}, "
            f"but this run's model config is {model_config}"
        )
    if state.get("data") != data_sizes:
        raise CheckpointError(f"{path}: written for data {state.get('data')}, not {data_sizes}")
