"""``tsv:inductive``: GraIL's layout, the training graph ``X_v1`` and beside it the test graph
``X_v1_ind``, each a folder of ``{train,valid,test}.txt`` facts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source
from cmpnn_dist.convert.sources.files import split_files
from cmpnn_dist.convert.sources.tsv_transductive import folder, train_lines


def files(raw: Path) -> list[Path]:
    """Both graphs' split files: ``X_v1/*`` then ``X_v1_ind/*``."""
    return split_files(raw) + split_files(raw.parent / f"{raw.name}_ind")


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.tsv import convert_inductive

    return convert_inductive(
        folder(spec),
        node_types=spec.node_types,
        drop_unseen_entities=spec.drop_unseen_entities,
        keep_unseen_entities=spec.keep_unseen_entities,
    )


register_source("tsv:inductive", convert, files=files, train_lines=train_lines)
