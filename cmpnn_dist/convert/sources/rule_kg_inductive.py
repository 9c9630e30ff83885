"""``synthetic:rule_kg_inductive``: the rule-planted graph with a separate test graph of new
entities (:mod:`cmpnn_dist.convert.synthetic.rule_kg`; parameters ``data.synthetic``)."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.rule_kg import build_rule_kg

    return build_rule_kg(spec.synthetic, inductive=True)


register_source("synthetic:rule_kg_inductive", convert, generator=True)
