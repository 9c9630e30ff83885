"""``hetionet``: hetio's upstream files (or a pre-split folder), split as PyKEEN's ``Hetionet``
dataset (:mod:`cmpnn_dist.convert.hetionet`); every visible file of the folder is recorded."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source
from cmpnn_dist.convert.sources.tsv_transductive import folder

HINT = (
    "put hetio's hetionet-v1.0-edges.sif.gz and hetionet-v1.0-nodes.tsv there "
    "(https://github.com/hetio/hetionet, folder hetnet/tsv), or set data.raw_path=FOLDER"
)


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.hetionet import convert_hetionet

    return convert_hetionet(
        folder(spec),
        drop_unseen_entities=spec.drop_unseen_entities,
        keep_unseen_entities=spec.keep_unseen_entities,
    )


register_source("hetionet", convert, missing_hint=HINT)
