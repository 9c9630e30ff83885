"""``ogb:biokg``: OGB's ogbl-biokg under ``<raw_path>/ogbl_biokg`` (typed nodes, the official
500 negatives per query: :mod:`cmpnn_dist.convert.ogb_biokg`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cmpnn_dist.convert.sources.base import BuildSpec, register_source
from cmpnn_dist.convert.sources.files import need_folder, visible_files

HINT = (
    "put OGB's ogbl_biokg folder there, so that {raw}/ogbl_biokg/split/random/train.pt "
    "exists (unzip http://snap.stanford.edu/ogb/data/linkproppred/biokg.zip and rename its "
    "biokg folder to ogbl_biokg; where there is network, ogb's loader downloads it: "
    'python -c "from ogb.linkproppred import LinkPropPredDataset as D; '
    "D('ogbl-biokg', root='{raw}')\"), or set data.raw_path=FOLDER"
)


def files(raw: Path) -> list[Path]:
    """Every visible file under ``ogbl_biokg/``, except OGB's own cache ``processed/`` of
    ``raw/`` (written during the conversion, so not a source) when ``raw/`` is there."""
    root = raw / "ogbl_biokg"
    need_folder(root)
    return visible_files(root, ("processed",) if (root / "raw").is_dir() else ())


def convert(spec: BuildSpec) -> dict[str, Any]:
    from cmpnn_dist.convert.ogb_biokg import convert_biokg

    return convert_biokg(Path(str(spec.raw_path)))


register_source("ogb:biokg", convert, files=files, missing_hint=HINT, default_name="ogbl-biokg")
