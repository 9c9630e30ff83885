"""``synthetic:rule_kg``: the rule-planted knowledge graph, the default dataset
(:mod:`cmpnn_dist.convert.synthetic.rule_kg`; parameters ``data.synthetic``)."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.rule_kg import build_rule_kg

    return build_rule_kg(spec.synthetic, inductive=False)


register_source("synthetic:rule_kg", convert, generator=True)
