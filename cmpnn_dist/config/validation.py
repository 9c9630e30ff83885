"""Validation of a composed config: every field against the schema, then the cross-field rules.

Field ranges come from the schema's metadata (:mod:`cmpnn_dist.config.options`: ``option`` /
``number``), the values registered beyond a ``Literal`` from :mod:`cmpnn_dist.config.registry`;
:func:`validate` adds the rules that join several fields (the ``model`` section's in
:func:`model_conflict`), those registered with ``register_check`` and those that look at this
machine (CUDA, Triton, torch-scatter, a C++ compiler).  Every failure is a
:class:`ConfigError` naming the dotted key, which the CLIs print as one ``error:`` line.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
from typing import Any

from cmpnn_dist.config.registry import allowed_values, registered_checks
from cmpnn_dist.config.schema import Config, ModelConfig
from cmpnn_dist.errors import UsageError


class ConfigError(UsageError, ValueError):
    """A config value outside its declared range; the message names the dotted key."""


# names that are not choices but were used for one: given in a config, each is refused with its
# line; in a run config saved in a checkpoint, each reads as SAVED_CHOICE_NAMES says
# (cmpnn_dist/runs/restore.py), so the run evaluates as it did
RETIRED_CHOICES: dict[str, dict[str, str]] = {
    "eval.hits_negatives_rule": {
        "torchdrug": "names NBFNet-PyG's C(49, i) rule (script/run.py), not TorchDrug's; use "
        "eval.hits_negatives_rule=nbfnet_pyg for that rule or =paper (the default: the paper's "
        "code, HxyScotthuang/CMPNN cmpnn/task.py, C(50, i))",
    },
}
SAVED_CHOICE_NAMES: dict[str, dict[str, str]] = {
    "eval.hits_negatives_rule": {"torchdrug": "nbfnet_pyg"},
}


def _check_field(key: str, value: Any, meta: Any) -> None:
    if "choices" in meta:
        allowed = allowed_values(key, meta)
        for item in value if meta["each"] else [value]:
            if isinstance(item, str) and (why := RETIRED_CHOICES.get(key, {}).get(item)):
                raise ConfigError(f"{key}={item} {why}")
            if item not in allowed or isinstance(item, bool):
                raise ConfigError(f"bad value {item!r} for {key}; choose one of {list(allowed)}")
        if meta["each"] and not value:
            raise ConfigError(f"{key} is empty; give a subset of {list(allowed)}")
    if "gt" in meta and value is not None:
        if meta["gt"] is not None and not value > meta["gt"]:
            raise ConfigError(f"{key} must be > {meta['gt']}, got {value}")
        if meta["ge"] is not None and not value >= meta["ge"]:
            raise ConfigError(f"{key} must be >= {meta['ge']}, got {value}")
        if meta["le"] is not None and not value <= meta["le"]:
            raise ConfigError(f"{key} must be <= {meta['le']}, got {value}")


def validate_section(obj: Any, prefix: str) -> None:
    """Check every field of one config dataclass (recursing into nested ones)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            validate_section(value, key + ".")
        else:
            _check_field(key, value, f.metadata)


def check_store_name(key: str, value: str, nested: bool = False) -> None:
    """A name that becomes a folder inside the store (``run_name``, ``data.name``,
    ``sweep_name``) stays inside it: not empty, no ``\\``, no part that is ``.``, ``..`` or
    starts with ``.`` (hidden folders are the store's temporary ones), no NUL; ``/`` only
    where ``nested`` (a sweep cell's ``run_name`` is ``<sweep>/<cell>``), never leading."""
    parts = str(value).split("/") if nested else [str(value)]
    bad = (
        not str(value)
        or "\\" in str(value)
        or "\0" in str(value)
        or any(not p or p.startswith(".") or (not nested and "/" in p) for p in parts)
    )
    if bad:
        raise ConfigError(
            f"{key}={value!r} must be a plain folder name inside the store (no path "
            "separators, no '..', not absolute, not starting with '.')"
        )


def model_conflict(m: ModelConfig) -> str | None:
    """Why fields of the ``model`` section cannot go together (one line naming the keys), or
    None: every rule that joins ``model.*`` fields, each written here once (the model's
    constructor asks :func:`check_model`, a run's config :func:`validate`)."""
    if m.num_bases is not None and m.message not in (3, "linear") and m.family != "rgcn":
        return (
            f"model.num_bases={m.num_bases} is used only with model.message=3 or model.family=rgcn"
        )
    if m.propagation == "pruned" and (m.family != "cmpnn" or m.init == 0):
        return (
            f"model.propagation=pruned needs model.family=cmpnn with model.init 1-3 (got "
            f"family={m.family}, init={m.init}): INIT 0 has no head indicator to start from"
        )
    if m.init_noise != "none" and (m.family != "cmpnn" or m.propagation == "pruned"):
        return (
            f"model.init_noise={m.init_noise} gives every node a nonzero initial state: it needs "
            f"model.family=cmpnn with dense propagation (got family={m.family}, "
            f"propagation={m.propagation})"
        )
    if m.prior != "none" and m.family != "cmpnn":
        return f"model.prior={m.prior} applies to model.family=cmpnn only (got {m.family})"
    if m.prior != "none" and m.propagation == "pruned" and m.prune.unvisited != "constant":
        return (
            f"model.prior={m.prior} already scores every candidate: "
            f"model.prune.unvisited={m.prune.unvisited} would add a second prior to the "
            "unvisited ones (use model.prune.unvisited=constant)"
        )
    return None


def check_model(m: ModelConfig) -> None:
    """The ``model`` section on its own (a model built from a ModelConfig in code, without a
    run's :func:`validate`): every field against the schema, then :func:`model_conflict`;
    raises :class:`ConfigError` naming the key."""
    validate_section(m, "model.")
    if (why := model_conflict(m)) is not None:
        raise ConfigError(why)


def validate(cfg: Config) -> None:
    """All value checks of a composed config; raises :class:`ConfigError` naming the key.

    Field ranges come from the schema (``option``, ``number``); below are the checks that
    join several fields, those registered with
    :func:`~cmpnn_dist.config.registry.register_check`, and those that look at this machine
    (CUDA, Triton, torch-scatter).  The registries load their plugins when first asked, so the
    registered values and rules apply whatever the caller imported."""
    validate_section(cfg, "")
    check_store_name("data.name", cfg.data.name)
    if cfg.run_name is not None:
        check_store_name("run_name", cfg.run_name, nested=True)
    workers = max(cfg.cluster.num_workers, 1)
    if cfg.train.batch_size % workers:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} is the global batch and must be "
            f"divisible by cluster.num_workers={cfg.cluster.num_workers}"
        )
    t = cfg.train
    if (why := model_conflict(cfg.model)) is not None:
        raise ConfigError(why)
    for check in registered_checks():  # rules registered by the layers below (message functions)
        try:
            check(cfg)
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.data.node_types is not None and not cfg.data.source.startswith("tsv:"):
        raise ConfigError(
            f"data.node_types applies to tsv: sources only; {cfg.data.source} brings its own "
            "node types (or none): drop data.node_types"
        )
    if t.warmup_steps and t.max_steps and t.warmup_steps > t.max_steps:
        raise ConfigError(
            f"train.warmup_steps={t.warmup_steps} exceeds train.max_steps={t.max_steps}"
        )
    _check_machine(cfg)


def _check_machine(cfg: Config) -> None:
    """Options this machine cannot run, caught before any work starts."""
    wants_cuda = cfg.train.device == "cuda" or cfg.cluster.use_gpu
    if wants_cuda and cfg.cluster.num_workers == 0:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "train.device=cuda but this machine has no CUDA device "
                "(torch.cuda.is_available() is False); use train.device=auto or cpu"
            )
    if cfg.train.device == "cuda" and cfg.cluster.num_workers > 0 and not cfg.cluster.use_gpu:
        raise ConfigError(
            "train.device=cuda with Ray workers needs cluster.use_gpu=true (workers get no GPU)"
        )
    if cfg.ops.impl == "fused" and importlib.util.find_spec("triton") is None:
        raise ConfigError(
            "ops.impl=fused needs Triton, which is not installed "
            '(pip install -e ".[gpu]" on a CUDA machine); use ops.impl=auto'
        )
    if cfg.ops.impl == "cpu" and wants_cuda:
        raise ConfigError(
            "ops.impl=cpu is the compiled CPU kernel; with train.device=cuda or "
            "cluster.use_gpu=true use ops.impl=auto"
        )
    if cfg.ops.impl == "cpu" and shutil.which(os.environ.get("CXX") or "c++") is None:
        raise ConfigError(
            "ops.impl=cpu compiles its kernel on first use but finds no C++ compiler "
            "(c++ or $CXX); install one (e.g. g++) or use ops.impl=auto"
        )
    if cfg.ops.impl == "scatter" and importlib.util.find_spec("torch_scatter") is None:
        raise ConfigError(
            "ops.impl=scatter needs torch-scatter, which is not installed "
            '(pip install -e ".[scatter]"); use ops.impl=auto'
        )
