"""``synthetic:biokg_scale``: a typed graph of ogbl-biokg's size and type mix
(:mod:`cmpnn_dist.convert.synthetic.biokg_scale`; parameters ``data.synthetic``)."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.biokg_scale import build_biokg_scale

    return build_biokg_scale(spec.synthetic)


register_source("synthetic:biokg_scale", convert, generator=True)
