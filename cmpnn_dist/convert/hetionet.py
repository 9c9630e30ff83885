"""Hetionet's published split: ``train/valid/test`` TSVs of ``Kind::id<TAB>relation<TAB>Kind::id``.

Node types are the ``Kind`` prefixes.  A first line ``source<TAB>metaedge<TAB>target`` (the
header of Hetionet's ``.sif`` edge files) is skipped.  Transductive rules as for TSV.
"""

from __future__ import annotations

from pathlib import Path

from cmpnn_dist.convert.tsv import convert_transductive

HEADER = b"source\tmetaedge\ttarget"


def convert_hetionet(
    folder: str | Path, *, drop_unseen_entities: bool = False, keep_unseen_entities: bool = False
) -> dict:
    out = convert_transductive(
        folder,
        drop_unseen_entities=drop_unseen_entities,
        keep_unseen_entities=keep_unseen_entities,
        node_types="prefix",
        header_line=HEADER,
    )
    out["meta"]["format"] = "hetionet"
    return out
