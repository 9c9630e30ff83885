"""Raw-file helpers for a source's ``files``: the files a build reads, each hashed into the
dataset's source record (:mod:`cmpnn_dist.convert.provenance`), or :class:`SourceMissing` naming the
first that is not there."""

from __future__ import annotations

import os
from pathlib import Path

from cmpnn_dist.storage.errors import StorageError

SPLITS = ("train", "valid", "test")


class SourceMissing(StorageError):
    """The raw source of a dataset (a folder or one of its files) cannot be read."""

    def __init__(self, path: Path, what: str = "does not exist") -> None:
        super().__init__(f"{path} {what}")
        self.path = Path(path)


def need_folder(folder: Path) -> None:
    """:class:`SourceMissing` unless ``folder`` is a folder."""
    if not folder.is_dir():
        raise SourceMissing(folder, "is not a folder" if folder.exists() else "does not exist")


def need_file(path: Path) -> Path:
    """``path`` if it is a file, else :class:`SourceMissing` naming it."""
    if not path.is_file():
        raise SourceMissing(path)
    return path


def visible_files(root: Path, skip_top: tuple[str, ...] = ()) -> list[Path]:
    """Every file under ``root`` whose name and folders do not start with ``.`` (sorted walk),
    leaving out the top-level folders ``skip_top``."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and not (rel == Path(".") and d in skip_top)
        )
        out.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
    return out


def split_files(folder: Path) -> list[Path]:
    """``folder``'s ``{train,valid,test}.txt`` (or ``.tsv``); :class:`SourceMissing` naming
    the folder or the first missing split."""
    need_folder(folder)
    out = []
    for split in SPLITS:
        found = [folder / n for n in (f"{split}.txt", f"{split}.tsv") if (folder / n).is_file()]
        if not found:
            raise SourceMissing(folder / f"{split}.txt", f"does not exist (nor {split}.tsv)")
        out.append(found[0])
    return out
