"""Typed configuration: the dataclasses below are the schema of every YAML in ``conf/``.

They are registered with Hydra's ConfigStore as structured configs, so an unknown key or a value
of the wrong type in a preset or on the command line is rejected by Hydra with a message naming
the key.  The root node is :class:`Config`; presets live in ``conf/<name>.yaml`` and are
selected with ``conf=<name>``.

Option values are declared once, here: each choice field names its ``Literal`` type (the list
of allowed values) and each number its bounds, as field metadata (``option`` / ``number``).
:func:`validate` walks the schema and checks every field against them, so a new knob cannot
skip the check, and the model, the CLI and the docs import the same ``Literal`` types instead
of repeating their own lists.  (OmegaConf 2.3 cannot store ``Literal`` annotations, hence the
metadata; the field's own annotation stays the primitive type.)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from cmpnn_dist.errors import UsageError

Family = Literal["cmpnn", "rgcn", "compgcn"]
Init = Literal[0, 1, 2, 3]
InitNoise = Literal["none", "uniform"]
# the paper's MSG 1-3 and the names registered in cmpnn_dist.model.messages (its choices();
# a test keeps the two equal: the registry imports torch, this module must not)
Message = Literal[1, 2, 3, "query_mul", "relation_mul", "linear", "rotate", "transe"]
Aggregate = Literal["sum", "mean", "max", "pna"]
History = Literal["t", "0"]
Readout = Literal["none", "sum", "relation"]
Propagation = Literal["dense", "pruned"]
ModelPrior = Literal["none", "relations"]
PruneGate = Literal["straight_through", "sigmoid"]
PrunePriority = Literal["decoder", "mlp"]
PruneUnvisited = Literal["constant", "relations"]
OpsImpl = Literal["auto", "reference", "generic", "naive", "fused", "scatter", "cpu"]
EdgeRemoval = Literal["none", "query", "one_hop", "candidates"]
Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["fp32", "bf16"]
LrSchedule = Literal["constant", "cosine", "linear"]
Split = Literal["valid", "test"]
Negatives = Literal["typed", "uniform"]
Protocol = Literal["all", "typed", "ogb"]
Ties = Literal["pessimistic", "average"]
EvalFilter = Literal["all", "facts"]
HitsNegativesRule = Literal["paper", "nbfnet_pyg", "n_negatives"]
Backend = Literal["auto", "gloo", "nccl"]
# the built-in dataset sources of cmpnn_dist.convert.sources (a test keeps each registered
# there; a source registered beyond these is accepted through register_choice)
DataSource = Literal[
    "hetionet",
    "ogb:biokg",
    "synthetic:biokg_rules",
    "synthetic:biokg_scale",
    "synthetic:hetionet_schema",
    "synthetic:rule_kg",
    "synthetic:rule_kg_inductive",
    "synthetic:trisqr",
    "tsv:inductive",
    "tsv:transductive",
]


class ConfigError(UsageError, ValueError):
    """A config value outside its declared range; the message names the dotted key."""


def choices(literal: Any) -> tuple[Any, ...]:
    """The allowed values of one of the ``Literal`` option types above."""
    return get_args(literal)


def option(default: Any, literal: Any, *, each: bool = False) -> Any:
    """A choice field: ``default`` must be one of ``literal``'s values (``each``: a list whose
    every item must be)."""
    meta = {"choices": choices(literal), "each": each}
    if each:
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def number(
    default: Any, *, gt: float | None = None, ge: float | None = None, le: float | None = None
) -> Any:
    """A numeric field with bounds (``None`` as a value always passes: "unset")."""
    return field(default=default, metadata={"gt": gt, "ge": ge, "le": le})


@dataclass
class DataConfig:
    """Which dataset to train on and where it lives.

    ``source`` says how to build the Arrow dataset the first time it is needed: one of the
    sources registered in :mod:`cmpnn_dist.convert.sources` (the built-ins: ``DataSource``).
    ``raw_path`` is the folder holding the source files (TSV folders, OGB root, Hetionet
    TSVs); ``${data_root}`` resolves to ``../shared/data`` when present.
    """

    name: str = "rule_kg"
    source: str = option("synthetic:rule_kg", DataSource)
    raw_path: str | None = None
    num_shards: int = number(4, ge=1)
    # transductive TSV: valid/test facts whose entity never occurs in training are an error
    # unless dropped (counted and reported) or kept as isolated nodes (standard WN18RR / FB15k-237)
    drop_unseen_entities: bool = False
    keep_unseen_entities: bool = False
    # TSV sources: "prefix" (Kind::id names) or a TSV file of entity<TAB>type; None: untyped
    node_types: str | None = None
    # synthetic generators take their size and seed from here
    synthetic: dict[str, Any] = field(default_factory=dict)
    # the cached copy under <storage_root>/datasets/<name> is rebuilt when its source files or
    # the keys above changed (docs/datasets.md); rebuild=true rebuilds it regardless
    rebuild: bool = False
    # a cached dataset whose recorded source is gone is an error unless this is true
    allow_missing_source: bool = False


@dataclass
class PruneConfig:
    """Pruned propagation (``model.propagation=pruned``; A*Net's learned priority, Zhu et al.
    2023; :mod:`cmpnn_dist.model.pruned`).  Per layer and query, the top
    ``k = ceil(node_ratio * N)`` visited nodes by priority send along their top
    ``ceil(degree_ratio * k * E / N)`` out-edges (ranked by the receiver's priority);
    ``max_nodes`` / ``max_edges`` replace the ratios by absolute numbers when set.  The test
    values apply in eval mode (None: the training value).  ``priority``: ``decoder`` (A*Net:
    the priority of a node is the decoder's logit of its current state, so the loss trains it
    directly) or ``mlp`` (a separate MLP on [h || z_q], trained only through the gate).
    ``gate``: ``sigmoid`` (A*Net: sigmoid(priority) scales the sent state) or
    ``straight_through`` (the sent state is multiplied by 1 whose gradient is
    sigmoid'(priority)).  Budgets that keep everything select nothing: the
    sigmoid gate then gives way to the straight-through one and the model is exactly the dense
    one.  ``unvisited``: the score of a candidate never visited, ``constant`` (A*Net:
    decoder(0, z_q), all tied) or ``relations`` (that plus a learned prior on the relations
    around the candidate within ``unvisited_hops`` hops, :mod:`cmpnn_dist.model.relation_prior`).
    The defaults are A*Net's (benchmarks/results/pruned_accuracy.md: on fb237_ind_v1 at 0.1,
    test MRR .227 -> .274 over 3 seeds against mlp / straight_through)."""

    node_ratio: float = number(0.1, gt=0, le=1)
    degree_ratio: float = number(1.0, gt=0)
    test_node_ratio: float | None = number(None, gt=0, le=1)
    test_degree_ratio: float | None = number(None, gt=0)
    max_nodes: int | None = number(None, ge=1)
    max_edges: int | None = number(None, ge=1)
    gate: str = option("sigmoid", PruneGate)
    priority: str = option("decoder", PrunePriority)
    unvisited: str = option("constant", PruneUnvisited)
    unvisited_hops: int = number(2, ge=1)


@dataclass
class ModelConfig:
    """The C-MPNN design space (paper section 4.1 and appendix E), and the R-MPNN baselines.

    ``family``: ``cmpnn`` (everything below), or the transductive R-MPNN baselines ``rgcn`` /
    ``compgcn`` (:mod:`cmpnn_dist.model.rmpnn`), which read only ``num_layers``,
    ``hidden_dim``, ``num_bases`` (R-GCN) and ``dropout``.
    """

    family: str = option("cmpnn", Family)
    init: int = option(2, Init)  # 0 zeros, 1 indicator*1, 2 indicator*z_q, 3 indicator*(z_q+eps)
    # none: INIT alone (the paper's equations); uniform: every node's h^(0) also starts from
    # U[0, 1)^d noise drawn in each forward pass, as the paper's code does (cmpnn_dist.model.init)
    init_noise: str = option("none", InitNoise)
    # 1 | query_mul: h*W_r z_q, 2 | relation_mul: h*b_r, 3 | linear: W_r h (basis
    # decomposition), transe: h + W_r z_q, rotate: h o exp(i W_r z_q) (even hidden_dim)
    message: int | str = option(1, Message)
    num_bases: int | None = number(None, ge=1)  # MSG 3 only; None: one basis per relation
    aggregate: str = option("sum", Aggregate)
    history: str = option("t", History)  # "t": f(t)=t,  "0": f(t)=0
    readout: str = option("none", Readout)
    num_layers: int = number(6, ge=0)
    hidden_dim: int = number(32, ge=1)
    decoder_hidden_dim: int = number(64, ge=1)
    layer_norm: bool = True
    shortcut: bool = True
    dropout: float = number(0.0, ge=0, le=1)  # R-MPNN baselines: between layers
    # dense: every node, every edge, every layer; pruned: learned-priority pruning (model.prune)
    propagation: str = option("dense", Propagation)
    prune: PruneConfig = field(default_factory=PruneConfig)
    # relations: every candidate's logit plus W[q] . e_v, a learned summary of the relations
    # around v within prior_hops hops (cmpnn_dist.model.relation_prior); dense and pruned alike
    prior: str = option("none", ModelPrior)
    prior_hops: int = number(2, ge=1)


@dataclass
class OpsConfig:
    """Message-passing implementation (``auto``: fused on CUDA with Triton, else reference)."""

    impl: str = option("auto", OpsImpl)
    # reference path: at most this many (edge x query x dim) message entries per chunk
    chunk_elements: int = number(1 << 24, ge=1)


@dataclass
class TrainConfig:
    batch_size: int = number(8, ge=1)  # global batch (queries); per worker = batch / workers
    num_negatives: int = number(32, ge=1)
    adversarial_temperature: float = number(1.0, gt=0)
    lr: float = number(5e-3, gt=0)
    # learning-rate schedule over the run's steps: constant, cosine decay to 0, linear decay to 0;
    # the first warmup_steps ramp linearly from 0 (all schedules)
    lr_schedule: str = option("constant", LrSchedule)
    warmup_steps: int = number(0, ge=0)
    # fp32, or bf16 autocast of the forward pass (weights, optimizer and loss stay float32)
    precision: str = option("fp32", Precision)
    epochs: int = number(20, ge=1)
    max_steps: int | None = number(None, ge=1)  # a step budget that ends training early
    # a wall-clock budget in minutes (training and its validations, summed over resumes):
    # when spent, the current step is the last one (validated, checkpointed, best, tested),
    # as when max_steps ends training; the learning-rate schedule still spans the steps
    max_minutes: float | None = number(None, gt=0)
    # none | query (edges of the query fact, both directions) | one_hop (every edge between u and
    # v) | candidates (every edge between u and v or any sampled negative: NBFNet's and the
    # C-MPNN code's remove_one_hop); see Graph.query_edge_mask
    remove_query_edges: str = option("query", EdgeRemoval)
    # typed | uniform: negatives from the node types of the relation's training tails (typed;
    # the same as uniform where the graph has no node types) or from all nodes
    negatives: str = option("typed", Negatives)
    seed: int = number(0, ge=0)
    deterministic: bool = False
    # auto | cpu | cuda; with Ray workers, cuda needs cluster.use_gpu=true (workers get the GPU)
    device: str = option("auto", Device)
    log_every: int = number(50, ge=1)
    progress: bool = True
    # CPU intra-op threads; None: chosen from the cores other processes leave free and the
    # work size, re-checked every few seconds (cmpnn_dist/training/threads.py)
    num_threads: int | None = number(None, ge=1)


@dataclass
class EvalConfig:
    batch_size: int = number(16, ge=1)
    # evaluate on at most this many queries of each split (None: all)
    max_queries: int | None = number(None, ge=1)
    num_negatives_hits: int = number(50, ge=1)  # hits@10_50 of the inductive protocol
    # whose hits@10_50 rule: paper (the paper's code, HxyScotthuang/CMPNN cmpnn/task.py, as
    # NBFNet's TorchDrug nbfnet/task.py: C(50, i), the target among the samples) | nbfnet_pyg
    # (NBFNet-PyG's script/run.py: C(49, i) over the negatives) | n_negatives (C(50, i) over
    # the negatives); formulas in cmpnn_dist/evaluation/metrics.py
    hits_negatives_rule: str = option("paper", HitsNegativesRule)
    # all (filtered, every entity) | typed (filtered, entities of the target's type) | ogb
    # (OGB's official 500 negative heads / tails, metrics by ogb's Evaluator)
    protocol: str = option("all", Protocol)
    # pessimistic (a tied target ranks below its ties) | average (OGB: mean of the optimistic
    # and pessimistic rank); protocol=ogb always uses average, as ogb's Evaluator does
    ties: str = option("pessimistic", Ties)
    # which true answers a ranking filters out: all (every known fact: the split graph's train,
    # valid and test facts) | facts (an inductive split ranks among the facts of the graph it
    # is ranked on only, as the paper's code does: HxyScotthuang/CMPNN cmpnn/task.py,
    # InductiveKnowledgeGraphCompletion.target; other test answers count as negatives; a
    # transductive split filters every fact either way, as that code does)
    filter: str = option("all", EvalFilter)
    # which splits are ranked: "valid" after every epoch (it picks the best weights; without it
    # the last weights are kept), "test" once at the end
    splits: list[str] = option(["valid", "test"], Split, each=True)


@dataclass
class CheckpointConfig:
    every_steps: int | None = number(None, ge=1)  # also at the end of every epoch
    keep_last: int = number(2, ge=1)
    # also every N minutes (checked at step boundaries, decided the same way on every rank), so
    # a run killed before its first epoch ends loses at most that much; null: off
    every_minutes: float | None = number(10.0, gt=0)


@dataclass
class ClusterConfig:
    """Distributed execution with Ray Train; num_workers=0 trains in-process without Ray."""

    num_workers: int = number(0, ge=0)
    use_gpu: bool = False
    cpus_per_worker: float = number(1.0, gt=0)
    gpus_per_worker: float = number(1.0, gt=0)
    address: str | None = None  # Ray address; None uses RAY_ADDRESS or starts a local Ray
    # the address every port of that local Ray (and DDP's rendezvous) listens on; the loopback
    # one keeps them off the network, null: Ray's choice (the machine's outward address)
    host: str | None = "127.0.0.1"
    max_failures: int = number(0, ge=0)
    collective_timeout_s: float = number(300.0, gt=0)
    backend: str = option("auto", Backend)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # storage root: datasets under <root>/datasets, runs and checkpoints under <root>/runs;
    # default $CMPNN_STORAGE_ROOT, else ./storage, made absolute (runs/folder.py)
    storage_root: str = field(default_factory=lambda: default_storage_root())
    data_root: str = "../shared/data"  # where reference TSV graphs are read from
    run_name: str | None = None  # None: a fresh timestamped name
    resume: bool = True  # continue <root>/runs/<run_name> when it holds a checkpoint


_REGISTERED_CHOICES: dict[str, list[Any]] = {}

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


def register_choice(key: str, value: Any) -> None:
    """Accept ``value`` for the choice field ``key`` (dotted, e.g. ``model.aggregate``) beyond
    its ``Literal``: the registries of the layers below (message functions, aggregations,
    evaluation protocols) call this for each entry they register, so a new entry is one file
    and the schema imports none of them.  Idempotent."""
    values = _REGISTERED_CHOICES.setdefault(key, [])
    if value not in values:
        values.append(value)


def allowed_values(key: str, meta: Any) -> tuple[Any, ...]:
    """The values choice field ``key`` accepts: its ``Literal``'s, then registered ones."""
    extra = [v for v in _REGISTERED_CHOICES.get(key, ()) if v not in meta["choices"]]
    return (*meta["choices"], *extra)


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


_REGISTERED_CHECKS: list[Callable[[Config], None]] = []


def register_check(check: Callable[[Config], None]) -> Callable[[Config], None]:
    """Add a rule that :func:`validate` runs after the field checks.  Registries register into
    the schema this way (the model's message registry adds each message function's own
    ``check_config``: rotate needs an even ``model.hidden_dim``), so this module imports no
    layer below it; ``check`` raises ValueError (or ConfigError) naming the key.  Whoever
    validates a config for a run (the CLIs, checkpoint restore) imports those registries first.
    Idempotent: registering the same function twice keeps one."""
    if check not in _REGISTERED_CHECKS:
        _REGISTERED_CHECKS.append(check)
    return check


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

    Field ranges come from the schema (:func:`option`, :func:`number`); below are the checks
    that join several fields, those registered with :func:`register_check`, and those that
    look at this machine (CUDA, Triton, torch-scatter)."""
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
    for check in _REGISTERED_CHECKS:  # rules registered by the layers below (message functions)
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


ENV_STORAGE_ROOT = "CMPNN_STORAGE_ROOT"


def default_storage_root() -> str:
    """``$CMPNN_STORAGE_ROOT``, else ``./storage`` -- or ``~/cmpnn_dist/storage`` inside a
    ``ray job submit --working-dir`` copy, which vanishes with the cluster; absolute."""
    env = os.environ.get(ENV_STORAGE_ROOT)
    if env:
        return env if "://" in env else str(Path(env).expanduser().resolve())
    if "runtime_resources/working_dir_files" in str(Path.cwd()):
        return str(Path.home() / "cmpnn_dist" / "storage")
    return str(Path.cwd() / "storage")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain containers (dataclass or OmegaConf)."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def register_configs() -> None:
    """Register the schema with Hydra's ConfigStore (idempotent).  Hydra is imported here, not
    at module level, so the model and ops layers (which read these dataclasses) run without it."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="cmpnn_schema", node=Config)
