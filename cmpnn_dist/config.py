"""Typed configuration: the dataclasses below are the schema of every YAML in ``conf/``.

They are registered with Hydra's ConfigStore as structured configs, so an unknown key
or a value of the wrong type in a preset or on the command line is rejected by Hydra
with a message naming the key.  The root node is :class:`Config`; presets live in
``conf/<name>.yaml`` and are selected with ``conf=<name>``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class DataConfig:
    """Which dataset to train on and where it lives.

    ``source`` says how to build the Arrow dataset the first time it is needed:
    ``synthetic:rule_kg``, ``synthetic:rule_kg_inductive``, ``synthetic:trisqr``,
    ``synthetic:biokg_scale``, ``tsv:transductive``, ``tsv:inductive``, ``ogb:biokg`` or
    ``hetionet``.  ``raw_path`` is the folder holding the source files (TSV folders, OGB
    root, Hetionet TSVs); ``${data_root}`` resolves to ``../shared/data`` when present.
    """

    name: str = "rule_kg"
    source: str = "synthetic:rule_kg"
    raw_path: str | None = None
    num_shards: int = 4
    # transductive TSV: valid/test facts whose entity never occurs in training are an error
    # unless dropped (counted and reported) or kept as isolated nodes (standard WN18RR / FB15k-237)
    drop_unseen_entities: bool = False
    keep_unseen_entities: bool = False
    # TSV sources: "prefix" (Kind::id names) or a TSV file of entity<TAB>type; None: untyped
    node_types: str | None = None
    # synthetic generators take their size and seed from here
    synthetic: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """The C-MPNN design space (paper section 4.1 and appendix E)."""

    init: int = 2  # INIT 0 zeros, 1 indicator*1, 2 indicator*z_q, 3 indicator*(z_q+eps)
    message: int = 1  # MSG 1: h*W_r z_q, 2: h*b_r, 3: W_r h (basis decomposition)
    num_bases: int | None = None  # MSG 3 only; None means one basis per relation
    aggregate: str = "sum"  # sum | mean | max | pna
    history: str = "t"  # "t": f(t)=t,  "0": f(t)=0
    readout: str = "none"  # none | sum | relation
    num_layers: int = 6
    hidden_dim: int = 32
    decoder_hidden_dim: int = 64
    layer_norm: bool = True
    shortcut: bool = True


@dataclass
class OpsConfig:
    """Message-passing implementation: auto | reference | naive | fused | scatter."""

    impl: str = "auto"
    # reference path: at most this many (edge x query x dim) message entries per chunk
    chunk_elements: int = 1 << 24


@dataclass
class TrainConfig:
    batch_size: int = 8  # global batch (queries); per worker = batch_size / num_workers
    num_negatives: int = 32
    adversarial_temperature: float = 1.0
    lr: float = 5e-3
    epochs: int = 20
    max_steps: int | None = None  # a step budget that ends training early
    # none | query (edges of the query fact, both directions) | one_hop (every edge between u and
    # v) | candidates (every edge between u and v or any sampled negative: NBFNet's and the
    # C-MPNN code's remove_one_hop); see Graph.query_edge_mask
    remove_query_edges: str = "query"
    # typed | uniform: negatives from the node types of the relation's training tails (typed,
    # the default; uniform where the graph has no node types) or from all nodes
    negatives: str = "typed"
    seed: int = 0
    deterministic: bool = False
    device: str = "auto"  # auto | cpu | cuda
    log_every: int = 50
    progress: bool = True


@dataclass
class EvalConfig:
    batch_size: int = 16
    # evaluate on at most this many queries of each split (None: all)
    max_queries: int | None = None
    num_negatives_hits: int = 50  # hits@10_50 of the inductive protocol
    # all (filtered, every entity) | typed (filtered, entities of the target's type) | ogb
    # (OGB's official 500 negative heads / tails, metrics by ogb's Evaluator)
    protocol: str = "all"
    # pessimistic (a tied target ranks below its ties) | average (OGB: mean of the optimistic
    # and pessimistic rank); protocol=ogb always uses average, as ogb's Evaluator does
    ties: str = "pessimistic"
    splits: list[str] = field(default_factory=lambda: ["valid", "test"])


@dataclass
class CheckpointConfig:
    every_steps: int | None = None  # also at the end of every epoch
    keep_last: int = 2


@dataclass
class ClusterConfig:
    """Distributed execution with Ray Train; num_workers=0 trains in-process without Ray."""

    num_workers: int = 0
    use_gpu: bool = False
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 1.0
    address: str | None = None  # Ray address; None uses RAY_ADDRESS or starts a local Ray
    max_failures: int = 0
    collective_timeout_s: float = 300.0
    backend: str = "auto"  # auto | gloo | nccl


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # storage root: datasets under <root>/datasets, runs and checkpoints under <root>/runs
    storage_root: str = "storage"
    data_root: str = "../shared/data"  # where reference TSV graphs are read from
    run_name: str | None = None  # None: a fresh timestamped name
    resume: bool = True  # continue <root>/runs/<run_name> when it holds a checkpoint


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
