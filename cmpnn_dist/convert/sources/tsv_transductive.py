"""``tsv:transductive``: one folder of ``{train,valid,test}.txt`` (or ``.tsv``) facts,
``head<TAB>relation<TAB>tail`` a line (FB15k-237, WN18RR, your own graph)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source
from cmpnn_dist.convert.sources.files import split_files
from cmpnn_dist.storage.errors import StorageError


def folder(spec: BuildSpec) -> Path:
    """The spec's raw folder, or StorageError naming it."""
    raw = Path(str(spec.raw_path))
    if not raw.is_dir():
        raise StorageError("no such folder", raw)
    return raw


def train_lines(raw: Path) -> tuple[Path, int]:
    from cmpnn_dist.convert.tsv import train_lines as count

    return count(raw)


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.tsv import convert_transductive

    return convert_transductive(
        folder(spec),
        node_types=spec.node_types,
        drop_unseen_entities=spec.drop_unseen_entities,
        keep_unseen_entities=spec.keep_unseen_entities,
    )


register_source("tsv:transductive", convert, files=split_files, train_lines=train_lines)
