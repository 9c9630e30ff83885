"""``synthetic:trisqr``: TRI-SQR, the paper's triangle / square pairs
(:mod:`cmpnn_dist.convert.synthetic.trisqr`; parameters ``data.synthetic``)."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.trisqr import build_trisqr

    return build_trisqr(spec.synthetic)


register_source("synthetic:trisqr", convert, generator=True)
