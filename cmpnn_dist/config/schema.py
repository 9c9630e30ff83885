"""The typed configuration schema: the dataclasses below are the schema of every YAML in ``conf/``.

They are registered with Hydra's ConfigStore as structured configs (:func:`register_configs`),
so an unknown key or a value of the wrong type in a preset or on the command line is rejected by
Hydra with a message naming the key.  The root node is :class:`Config`; presets live in
``conf/<name>.yaml`` and are selected with ``conf=<name>``.

Option values are declared once, in :mod:`cmpnn_dist.config.options`: each choice field names
its ``Literal`` type (:func:`option`) and each number its bounds (:func:`number`);
:func:`cmpnn_dist.config.validate` checks every field against them, so a new knob cannot skip
the check.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cmpnn_dist.config.environment import default_storage_root
from cmpnn_dist.config.options import (
    Aggregate,
    Backend,
    DataSource,
    Device,
    EdgeRemoval,
    EvalFilter,
    Family,
    History,
    HitsNegativesRule,
    Init,
    InitNoise,
    LrSchedule,
    Message,
    ModelPrior,
    Negatives,
    OpsImpl,
    Precision,
    Propagation,
    Protocol,
    PruneGate,
    PrunePriority,
    PruneUnvisited,
    Readout,
    ReadoutPool,
    Split,
    Ties,
    number,
    option,
)


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
    The defaults are A*Net's (benchmarks/results/pruned/pruned_accuracy.md: on fb237_ind_v1 at 0.1,
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
    # sum: the paper's equations; mean: the sum / N (every node of the graph), the paper's code
    # (readout_type mean); readout_bias: W_1, W_2 with a bias, as the paper's code's nn.Linear
    readout_pool: str = option("sum", ReadoutPool)
    readout_bias: bool = False
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
