"""Ingestion: raw sources -> graph-store datasets (``python -m cmpnn_dist.convert``).

Sources: ``tsv:transductive``, ``tsv:inductive`` (GraIL ``X_v1`` + ``X_v1_ind``),
``ogb:biokg``, ``hetionet``, ``synthetic:rule_kg``, ``synthetic:rule_kg_inductive``,
``synthetic:trisqr``, ``synthetic:biokg_scale``, ``synthetic:hetionet_schema``.
"""

from cmpnn_dist.convert.prepare import SOURCES, build_dataset, convert_source, ensure_dataset

__all__ = ["SOURCES", "build_dataset", "convert_source", "ensure_dataset"]
