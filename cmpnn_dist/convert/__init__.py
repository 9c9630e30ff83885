"""Ingestion: raw sources -> graph-store datasets (``python -m cmpnn_dist.convert``).

Sources are a registry, one module each (:mod:`cmpnn_dist.convert.sources`): ``tsv:transductive``,
``tsv:inductive`` (GraIL ``X_v1`` + ``X_v1_ind``), ``ogb:biokg``, ``hetionet``,
``synthetic:rule_kg``, ``synthetic:rule_kg_inductive``, ``synthetic:trisqr``,
``synthetic:biokg_scale``, ``synthetic:biokg_rules``, ``synthetic:hetionet_schema``.  A build's
inputs travel as one :class:`~cmpnn_dist.convert.sources.BuildSpec`.
"""

from cmpnn_dist.lazy import exports

__all__ = ["BuildSpec", "build", "build_dataset", "ensure_dataset"]  # imported on first use
__getattr__, __dir__ = exports(
    __name__,
    {"BuildSpec": "cmpnn_dist.convert.sources", "build": "cmpnn_dist.convert.prepare",
     "build_dataset": "cmpnn_dist.convert.prepare", "ensure_dataset": "cmpnn_dist.convert.prepare"},
)  # fmt: skip
