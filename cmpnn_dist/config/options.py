"""The allowed values of the schema's fields, declared once: the ``Literal`` option types and
the field helpers that attach them (and numeric bounds) to a dataclass field.

Each choice field of :mod:`cmpnn_dist.config.schema` names its ``Literal`` type through
:func:`option`, each number its bounds through :func:`number`; :func:`cmpnn_dist.config.validate`
walks the schema and checks every field against this metadata.  The model, the CLI and the docs
import the same ``Literal`` types (``choices(Aggregate)``) instead of repeating their own lists.
(OmegaConf 2.3 cannot store ``Literal`` annotations, hence the metadata; the field's own
annotation stays the primitive type.)
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, get_args

Family = Literal["cmpnn", "rgcn", "compgcn"]
Init = Literal[0, 1, 2, 3]
InitNoise = Literal["none", "uniform"]
# the paper's MSG 1-3 and the names registered in cmpnn_dist.model.messages (its choices();
# a test keeps the two equal: the registry imports torch, this module must not)
Message = Literal[1, 2, 3, "query_mul", "relation_mul", "linear", "rotate", "transe"]
Aggregate = Literal["sum", "mean", "max", "pna"]
History = Literal["t", "0"]
Readout = Literal["none", "sum", "relation"]
ReadoutPool = Literal["sum", "mean"]
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
