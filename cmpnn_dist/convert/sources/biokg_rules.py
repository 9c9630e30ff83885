"""``synthetic:biokg_rules``: a rule-planted graph in ogbl-biokg's shape
(:mod:`cmpnn_dist.convert.synthetic.biokg_rules`; parameters ``data.synthetic``)."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.biokg_rules import build_biokg_rules

    return build_biokg_rules(spec.synthetic)


register_source("synthetic:biokg_rules", convert, generator=True)
