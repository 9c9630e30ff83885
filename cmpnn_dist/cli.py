"""Shared command-line plumbing: compose a Hydra config, resolve paths, find the dataset.

``python -m cmpnn_dist.train conf=NAME key=value ...`` composes ``conf/NAME.yaml`` (every
preset extends the structured schema :class:`cmpnn_dist.config.Config`) with the given
overrides through Hydra's compose API.  Any composition error (unknown key, wrong type,
unknown preset) becomes one :class:`UsageError` line and exit status 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from cmpnn_dist.config import Config, register_configs

PACKAGE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_ROOT.parent


class UsageError(Exception):
    """A user mistake (bad config, missing data): printed as one line, exit status 2."""


def conf_dir() -> Path:
    """The preset folder: ``conf/`` beside the package (source checkout or Ray working dir)."""
    for candidate in (Path.cwd() / "conf", REPO_ROOT / "conf"):
        if (candidate / "default.yaml").is_file():
            return candidate.resolve()
    raise UsageError("cannot find the preset folder conf/ (looked in the working dir and repo)")


def default_data_root() -> Path:
    """``../shared/data`` beside the working dir, else beside the repository checkout."""
    for candidate in (Path.cwd().parent / "shared" / "data", REPO_ROOT.parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate.resolve()
    return (Path.cwd().parent / "shared" / "data").resolve()


def available_presets() -> list[str]:
    return sorted(p.stem for p in conf_dir().glob("*.yaml"))


def split_args(argv: Sequence[str], special: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Pull ``name=value`` arguments for the ``special`` names out of ``argv``."""
    found: dict[str, str] = {}
    rest: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in special:
            found[key] = value
        elif arg.startswith("-"):
            raise UsageError(f"unknown option {arg!r}; arguments are Hydra overrides key=value")
        else:
            rest.append(arg)
    return found, rest


def compose_config(preset: str, overrides: Sequence[str]) -> Config:
    """Compose ``conf/<preset>.yaml`` with ``overrides``; returns a typed, resolved Config."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    presets = available_presets()
    if preset not in presets:
        raise UsageError(f"unknown preset conf={preset!r}; choose one of: {', '.join(presets)}")
    GlobalHydra.instance().clear()
    if not any(o.split("=", 1)[0].lstrip("+~") == "data_root" for o in overrides):
        overrides = [f"data_root={default_data_root()}", *overrides]
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose(config_name=preset, overrides=list(overrides))
        OmegaConf.resolve(cfg)
        obj = OmegaConf.to_object(cfg)
    except Exception as exc:  # Hydra / OmegaConf errors: keep the message, drop the trace
        raise UsageError(
            f"config error in conf/{preset}.yaml with {list(overrides)}: {_one_line(exc)}"
        ) from exc
    assert isinstance(obj, Config)
    validate_config(obj)
    return obj


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    cause = exc.__cause__
    if cause is not None and str(cause).strip() and str(cause).strip() not in text:
        text = f"{text} ({str(cause).strip()})"
    return " ".join(text.split())


_CHOICES: dict[str, tuple[Any, ...]] = {
    "model.init": (0, 1, 2, 3),
    "model.message": (1, 2, 3),
    "model.aggregate": ("sum", "mean", "max", "pna"),
    "model.history": ("t", "0"),
    "model.readout": ("none", "sum", "relation"),
    "ops.impl": ("auto", "reference", "naive", "fused", "scatter"),
    "train.remove_query_edges": ("none", "query", "one_hop", "candidates"),
    "train.device": ("auto", "cpu", "cuda"),
    "cluster.backend": ("auto", "gloo", "nccl"),
}


def validate_config(cfg: Config) -> None:
    """Value checks the type system cannot express; raises UsageError naming the key."""
    for dotted, choices in _CHOICES.items():
        section, key = dotted.split(".")
        value = getattr(getattr(cfg, section), key)
        if value not in choices:
            raise UsageError(f"bad value {value!r} for {dotted}; choose one of {list(choices)}")
    positive = {
        "model.num_layers": cfg.model.num_layers,
        "model.hidden_dim": cfg.model.hidden_dim,
        "train.batch_size": cfg.train.batch_size,
        "train.num_negatives": cfg.train.num_negatives,
        "eval.batch_size": cfg.eval.batch_size,
        "data.num_shards": cfg.data.num_shards,
    }
    for key, value in positive.items():
        if value <= 0:
            raise UsageError(f"{key} must be positive, got {value}")
    workers = max(cfg.cluster.num_workers, 1)
    if cfg.train.batch_size % workers:
        raise UsageError(
            f"train.batch_size={cfg.train.batch_size} is the global batch and must be "
            f"divisible by cluster.num_workers={cfg.cluster.num_workers}"
        )


def dataset_path(cfg: Config) -> Path:
    return Path(cfg.storage_root).expanduser().resolve() / "datasets" / cfg.data.name


_MISSING_DATA_HINTS = {
    "ogb:biokg": (
        "put OGB's ogbl_biokg folder there, so that {raw}/ogbl_biokg/split/random/train.pt "
        "exists (unzip http://snap.stanford.edu/ogb/data/linkproppred/biokg.zip and rename its "
        "biokg folder to ogbl_biokg; where there is network, ogb's loader downloads it: "
        'python -c "from ogb.linkproppred import LinkPropPredDataset as D; '
        "D('ogbl-biokg', root='{raw}')\"), or set data.raw_path=FOLDER"
    ),
    "hetionet": (
        "put hetio's hetionet-v1.0-edges.sif.gz and hetionet-v1.0-nodes.tsv there "
        "(https://github.com/hetio/hetionet, folder hetnet/tsv), or set data.raw_path=FOLDER"
    ),
}


def ensure_dataset(cfg: Config, progress: bool = True) -> Path:
    """Return the dataset folder, converting it from ``cfg.data.source`` on first use."""
    from cmpnn_dist.storage import StorageError

    path = dataset_path(cfg)
    if (path / "manifest.json").is_file():
        return path
    from cmpnn_dist.convert import build_dataset

    raw = cfg.data.raw_path
    if raw is not None and not cfg.data.source.startswith("synthetic:"):
        if not Path(raw).expanduser().exists():
            raise UsageError(
                f"data for conf {cfg.data.name!r} not found: {raw} does not exist "
                f"(source {cfg.data.source}); "
                + _MISSING_DATA_HINTS.get(
                    cfg.data.source, "set data.raw_path or data_root=..."
                ).format(raw=Path(raw).expanduser())
            )
    if progress:
        print(f"building dataset {cfg.data.name} from {cfg.data.source} -> {path}", file=sys.stderr)
    try:
        build_dataset(
            cfg.data.source,
            path,
            raw_path=raw,
            num_shards=cfg.data.num_shards,
            drop_unseen_entities=cfg.data.drop_unseen_entities,
            keep_unseen_entities=cfg.data.keep_unseen_entities,
            node_types=cfg.data.node_types,
            synthetic=dict(cfg.data.synthetic),
            name=cfg.data.name,
        )
    except (StorageError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from exc
    return path


def run_cli(main: Callable[[list[str]], dict[str, Any]], argv: Sequence[str] | None = None) -> int:
    """Run ``main``; print its result as the last stdout line (one JSON object)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        result = main(argv)
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, default=_jsonable), flush=True)
    return 0


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that describe bad input (config, data files, checkpoints), not bugs."""
    errors: list[type[BaseException]] = [UsageError]
    try:
        from cmpnn_dist.storage import StorageError

        errors.append(StorageError)
    except ImportError:
        pass
    try:
        from cmpnn_dist.training.checkpoint import CheckpointError

        errors.append(CheckpointError)
    except ImportError:
        pass
    if "cmpnn_dist.distributed.driver" in sys.modules:  # never import Ray just for this
        errors.append(sys.modules["cmpnn_dist.distributed.driver"].DistributedTrainingError)
    return tuple(errors)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
