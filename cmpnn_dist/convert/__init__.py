"""Ingestion: raw sources -> graph-store datasets (``python -m cmpnn_dist.convert``).

Sources are a registry, one module each (:mod:`cmpnn_dist.convert.sources`): ``tsv:transductive``,
``tsv:inductive`` (GraIL ``X_v1`` + ``X_v1_ind``), ``ogb:biokg``, ``hetionet``,
``synthetic:rule_kg``, ``synthetic:rule_kg_inductive``, ``synthetic:trisqr``,
``synthetic:biokg_scale``, ``synthetic:biokg_rules``, ``synthetic:hetionet_schema``.  A build's
inputs travel as one :class:`~cmpnn_dist.convert.sources.BuildSpec`.
"""

from cmpnn_dist.convert.prepare import build, build_dataset, ensure_dataset
from cmpnn_dist.convert.sources import BuildSpec

__all__ = ["BuildSpec", "build", "build_dataset", "ensure_dataset"]
