"""Synthetic generators: rule-planted KG (default dataset), TRI-SQR, biokg-scale graph,
rule-planted graph in biokg's shape, Hetionet-schema graph."""

from cmpnn_dist.convert.synthetic.biokg_rules import build_biokg_rules
from cmpnn_dist.convert.synthetic.biokg_scale import build_biokg_scale
from cmpnn_dist.convert.synthetic.hetionet_schema import build_hetionet_schema
from cmpnn_dist.convert.synthetic.rule_kg import build_rule_kg
from cmpnn_dist.convert.synthetic.trisqr import TriSqrGraph, build_trisqr, trisqr_graphs

__all__ = [
    "TriSqrGraph",
    "build_biokg_rules",
    "build_biokg_scale",
    "build_hetionet_schema",
    "build_rule_kg",
    "build_trisqr",
    "trisqr_graphs",
]
