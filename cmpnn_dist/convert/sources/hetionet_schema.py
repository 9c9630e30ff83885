"""``synthetic:hetionet_schema``: a graph of Hetionet's schema and degree skew
(:mod:`cmpnn_dist.convert.synthetic.hetionet_schema`; parameters ``data.synthetic``).  With a
``raw_path``, its node table is Hetionet's real one (``hetionet-v1.0-nodes.tsv``, recorded);
without, a generated one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source
from cmpnn_dist.convert.sources.files import need_file, need_folder

NODES_FILE = "hetionet-v1.0-nodes.tsv"
HINT = (
    f"put hetio's {NODES_FILE} there (https://github.com/hetio/hetionet, folder hetnet/tsv), "
    "or leave data.raw_path unset for a generated node table"
)


def files(raw: Path) -> list[Path]:
    need_folder(raw)
    return [need_file(raw / NODES_FILE)]


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.synthetic.hetionet_schema import build_hetionet_schema

    return build_hetionet_schema(spec.synthetic, spec.raw_path)


register_source(
    "synthetic:hetionet_schema",
    convert,
    generator=True,
    raw_path="optional",
    files=files,
    missing_hint=HINT,
)
