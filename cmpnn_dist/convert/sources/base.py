"""The dataset-source registry: each ``data.source`` name and how a dataset is built from it.

A source is registered with one call, :func:`register_source`, from its own module of this
package (``cmpnn_dist/convert/sources/<name>.py``; the package imports every module in its
folder, so a new source is one new file, ``docs/extending.md``).  Registering adds the name to
the schema's accepted ``data.source`` values (:func:`cmpnn_dist.config.register_choice`), so
``validate()``, ``--help`` and ``python -m cmpnn_dist.convert`` list it.

A source's ``convert(spec)`` reads (or generates) the graph described by a :class:`BuildSpec`
(every input of a build, one typed object) and returns the keyword arguments of
:func:`cmpnn_dist.storage.writer.write_dataset` (no files written); ``files(raw)`` names the
raw files it reads, which the dataset's source record hashes (:mod:`cmpnn_dist.convert.provenance`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cmpnn_dist.config import register_choice
from cmpnn_dist.convert.sources.files import need_folder, visible_files
from cmpnn_dist.storage.errors import StorageError

RawPath = Literal["required", "optional", "none"]
DEFAULT_HINT = "set data.raw_path=... or data_root=..."


@dataclass(frozen=True)
class BuildSpec:
    """Every input of a conversion that changes its output.

    Attributes:
        source: a registered source (:func:`cmpnn_dist.convert.sources.names`).
        raw_path: absolute raw folder (None for a generator without one).
        num_shards, drop_unseen_entities, keep_unseen_entities, node_types, synthetic: as the
            ``data.*`` keys of the same name; ``node_types`` a file is made absolute.
        origin: ``"config"`` (built by train / evaluate) or ``"convert"`` (the convert CLI).
    """

    source: str
    raw_path: str | None = None
    num_shards: int = 4
    drop_unseen_entities: bool = False
    keep_unseen_entities: bool = False
    node_types: str | None = None
    synthetic: dict[str, Any] = field(default_factory=dict)
    origin: str = "config"

    @classmethod
    def make(
        cls,
        source: str,
        raw_path: str | Path | None = None,
        *,
        num_shards: int = 4,
        drop_unseen_entities: bool = False,
        keep_unseen_entities: bool = False,
        node_types: str | Path | None = None,
        synthetic: dict[str, Any] | None = None,
        origin: str = "config",
    ) -> BuildSpec:
        """Normalise paths (absolute) and parameters (plain JSON) of one conversion, keeping
        what the source takes (:class:`Source`): a raw folder
        unless its ``raw_path`` is ``"none"``, ``synthetic`` for a generator, ``node_types``
        otherwise.  StorageError for an unknown source."""
        src = get(source)
        raw = None if raw_path is None or src.raw_path == "none" else _abs(raw_path)
        nt = node_types if node_types is None or str(node_types) == "prefix" else _abs(node_types)
        return cls(
            source=source,
            raw_path=raw,
            num_shards=int(num_shards),
            drop_unseen_entities=bool(drop_unseen_entities),
            keep_unseen_entities=bool(keep_unseen_entities),
            node_types=None if src.generator or nt is None else str(nt),
            synthetic=_plain(dict(synthetic or {})) if src.generator else {},
            origin=origin,
        )

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> BuildSpec:
        p = record["params"]
        return cls.make(
            p["source"],
            record.get("raw_path"),
            num_shards=p["num_shards"],
            drop_unseen_entities=p["drop_unseen_entities"],
            keep_unseen_entities=p["keep_unseen_entities"],
            node_types=p["node_types"],
            synthetic=p["synthetic"],
            origin=record.get("origin", "convert"),
        )

    def params(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "num_shards": self.num_shards,
            "drop_unseen_entities": self.drop_unseen_entities,
            "keep_unseen_entities": self.keep_unseen_entities,
            "node_types": self.node_types,
            "synthetic": self.synthetic,
        }


def _abs(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


def _plain(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


@dataclass(frozen=True)
class Source:
    """One ``data.source`` value.

    Attributes:
        name: the ``data.source`` value (``kind:variant`` by convention).
        convert: ``spec -> write_dataset keyword arguments``; raises StorageError naming the
            file and line of bad input.
        raw_path: ``"required"`` (a folder of files), ``"optional"`` (a generator that can
            read a folder) or ``"none"`` (the spec's ``raw_path`` is dropped).
        generator: takes ``data.synthetic`` parameters (kept in the spec and its record) and no
            ``data.node_types`` (dropped); a file source the other way round.
        files: ``raw folder -> the raw files it reads``, raising :class:`SourceMissing` naming
            the first missing one; None: every visible file under the folder.
        missing_hint: the end of the error line when ``raw_path`` does not exist (``{raw}``
            is replaced by the path).
        default_name: the dataset name when none is given; None: the raw folder's name for a
            file source, the part after the last ``:`` for a generator.
        train_lines: ``raw folder -> (training file, its non-empty lines)``, an upper bound on
            the training facts taken without converting (a too-small graph is refused before
            anything is built); None: not counted.
    """

    name: str
    convert: Callable[[BuildSpec], dict[str, Any]]
    raw_path: RawPath = "required"
    generator: bool = False
    files: Callable[[Path], list[Path]] | None = None
    missing_hint: str = DEFAULT_HINT
    default_name: str | None = None
    train_lines: Callable[[Path], tuple[Path, int]] | None = None

    def raw_files(self, raw: Path) -> list[Path]:
        """The raw files under ``raw`` this source reads (:class:`SourceMissing` if absent)."""
        if self.files is not None:
            return self.files(raw)
        need_folder(raw)
        return visible_files(raw)

    def dataset_name(self, raw_path: str | Path | None) -> str:
        """The dataset's name when the caller gives none."""
        if self.default_name is not None:
            return self.default_name
        if raw_path is not None and not self.generator:
            return Path(raw_path).name
        return self.name.split(":")[-1]


_REGISTRY: dict[str, Source] = {}


def register_source(
    name: str,
    convert: Callable[[BuildSpec], dict[str, Any]],
    *,
    raw_path: RawPath | None = None,
    generator: bool = False,
    files: Callable[[Path], list[Path]] | None = None,
    missing_hint: str = DEFAULT_HINT,
    default_name: str | None = None,
    train_lines: Callable[[Path], tuple[Path, int]] | None = None,
) -> Source:
    """Make ``name`` selectable as ``data.source`` (and ``python -m cmpnn_dist.convert NAME``).

    ``raw_path`` defaults to ``"none"`` for a generator, ``"required"`` otherwise; the other
    arguments are :class:`Source`'s attributes.  Registering a name again replaces it."""
    mode: RawPath = raw_path or ("none" if generator else "required")
    if mode not in ("required", "optional", "none"):
        raise ValueError(f"source {name!r}: raw_path must be required, optional or none")
    source = Source(name, convert, mode, generator, files, missing_hint, default_name, train_lines)
    _REGISTRY[name] = source
    register_choice("data.source", name)
    return source


def get(name: str) -> Source:
    """The registered source ``name``; StorageError listing the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise StorageError(f"unknown source {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    """Every registered source name, sorted."""
    return sorted(_REGISTRY)
