"""Synthetic generators: rule-planted KG (default dataset), TRI-SQR, biokg-scale graph."""

from cmpnn_dist.convert.synthetic.biokg_scale import build_biokg_scale
from cmpnn_dist.convert.synthetic.rule_kg import build_rule_kg
from cmpnn_dist.convert.synthetic.trisqr import TriSqrGraph, build_trisqr, trisqr_graphs

__all__ = ["TriSqrGraph", "build_biokg_scale", "build_rule_kg", "build_trisqr", "trisqr_graphs"]
