"""Where a cached dataset came from, and whether it is still current (``data.rebuild``).

Every dataset built by :func:`cmpnn_dist.convert.build_dataset` records, in its manifest under
``source.record``::

    {"converter_version": 2, "origin": "config" | "convert", "build_id": "<uuid4 hex>",
     "source": "tsv:inductive", "raw_path": "/abs/path/fb237_v1",      # None: no raw folder
     "params": {"source", "num_shards", "drop_unseen_entities", "keep_unseen_entities",
                "node_types", "synthetic"},                # every input that changes the output
     "files": {"train.txt": {"size": 306475, "mtime_ns": ..., "sha256": "..."},
               "../fb237_v1_ind/train.txt": {...}}}       # keys relative to raw_path

:func:`plan` compares that record with what is wanted now and says *use*, *build* (with a
one-line reason) or *error* (the source cannot be read, so neither checking nor rebuilding is
possible).  Cost: one ``stat`` per raw file; a file is hashed only when its size is unchanged
but its mtime differs (a ``touch``, a copy), and when the content turns out to be the same the
new mtime is written back into the manifest so the next open is a stat again.

Which record counts: a dataset built for a config (``origin: config``, by ``train`` /
``evaluate``) is checked against the config's ``data.*``; one built by
``python -m cmpnn_dist.convert`` (``origin: convert``) is checked against its own recorded
source, so ``convert ... && train data.name=NAME`` keeps working; ``data.rebuild=true`` always
rebuilds from the config.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmpnn_dist.convert import sources
from cmpnn_dist.convert.sources.base import BuildSpec
from cmpnn_dist.convert.sources.files import SourceMissing
from cmpnn_dist.storage import format as fmt

# Bump when any converter writes different output for the same input and parameters:
# every cached dataset built by an older version is rebuilt on its next use.
# 2: source records; TRI-SQR declares its counterpart negatives (labeled_negatives).
CONVERTER_VERSION = 2

__all__ = ["BuildSpec", "Plan", "SourceMissing", "plan", "source_files", "source_record"]


# ---------------------------------------------------------------------------- raw files
def source_files(spec: BuildSpec) -> dict[str, Path]:
    """The raw files ``spec`` reads (its source's ``files``): key (path relative to
    ``raw_path``, or absolute for a node-type file) -> path.  Raises :class:`SourceMissing`
    naming the first missing one."""
    if spec.raw_path is None:
        return {}
    base = Path(spec.raw_path)
    files = sources.get(spec.source).raw_files(base)
    out = {os.path.relpath(p, base): p for p in files}
    if spec.node_types is not None and spec.node_types != "prefix":
        nt = Path(spec.node_types)
        if not nt.is_file():
            raise SourceMissing(nt)
        out[str(nt)] = nt
    return out


def _file_entry(path: Path) -> dict[str, Any]:
    st = path.stat()  # before hashing: a write during the hash leaves a newer mtime behind
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": fmt.sha256_file(path)}


def source_record(spec: BuildSpec) -> dict[str, Any]:
    """The record of a build of ``spec`` (stats and sha256 of every raw file, taken *before*
    the conversion reads them, so an edit during the conversion is seen on the next open)."""
    files = source_files(spec)
    return {
        "converter_version": CONVERTER_VERSION,
        "origin": spec.origin,
        "build_id": uuid.uuid4().hex,
        "source": spec.source,
        "raw_path": spec.raw_path,
        "params": spec.params(),
        "files": {key: _file_entry(p) for key, p in sorted(files.items())},
    }


# ---------------------------------------------------------------------------- checking
@dataclass
class Plan:
    """What to do with a dataset folder.

    Attributes:
        action: ``"use"`` (current), ``"build"`` (absent, stale or forced) or ``"error"``
            (its source cannot be read: ``reason`` names the path).
        reason: one line (why it is rebuilt, why it cannot be checked); "" when current.
        spec: what to build (``"build"``), or what it was checked against.
        cached: a complete dataset exists at the path.
        note: an extra line for the user when the cached copy is used unchecked.
        name: the recorded dataset name when ``spec`` comes from the record (convert CLI).
    """

    action: str
    reason: str
    spec: BuildSpec
    cached: bool = False
    note: str = ""
    name: str | None = None


def read_record(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(manifest, record)`` of the dataset at ``path``: (None, None) without a readable
    manifest, (manifest, None) for a dataset built before source records existed."""
    try:
        manifest = json.loads((path / fmt.MANIFEST).read_text())
    except (OSError, ValueError):
        return None, None
    source = manifest.get("source") if isinstance(manifest, dict) else None
    record = source.get("record") if isinstance(source, dict) else None
    return manifest, record if isinstance(record, dict) else None


def plan(path: Path, wanted: BuildSpec, force: bool = False) -> Plan:
    """Decide whether the dataset at ``path`` can be used for ``wanted`` (see module doc).

    Refreshes the record's mtimes (and raw path) in the manifest when files were touched or
    moved without changing their content."""
    manifest_file = path / fmt.MANIFEST
    if not manifest_file.is_file():
        return Plan("build", "", wanted)
    if force:
        return Plan("build", "data.rebuild=true", wanted, cached=True)
    manifest, record = read_record(path)
    if manifest is None:
        return Plan("build", f"{manifest_file} is unreadable", wanted, cached=True)
    if record is None:
        built_from = (manifest.get("source") or {}).get("source")
        if built_from != wanted.source:
            note = (
                f"dataset {path.name} was built from {built_from} before source records existed; "
                "used as is (data.rebuild=true rebuilds it from the config)"
            )
            return Plan("use", "", wanted, cached=True, note=note)
        legacy = {"raw_path": (manifest.get("source") or {}).get("raw_path")}
        try:
            source_files(wanted)
        except SourceMissing as exc:
            return Plan("error", _missing_line(path, wanted, legacy, exc), wanted, cached=True)
        return Plan("build", "it was built before source records existed", wanted, cached=True)
    name = None
    spec = wanted
    if record.get("origin") == "convert":
        spec, name = BuildSpec.from_record(record), manifest.get("name")
    try:
        files = source_files(spec)
    except SourceMissing as exc:
        return Plan("error", _missing_line(path, spec, record, exc), spec, cached=True)
    reason, updated = _changed(record, spec, files)
    if reason:
        return Plan("build", reason, spec, cached=True, name=name)
    if updated is not None:
        manifest["source"]["record"] = updated
        _rewrite_manifest(path, manifest)
    return Plan("use", "", spec, cached=True)


def _missing_line(path: Path, spec: BuildSpec, record: dict[str, Any], exc: SourceMissing) -> str:
    what = (
        "its source (recorded by python -m cmpnn_dist.convert)"
        if spec.origin == "convert"
        else "data.raw_path"
    )
    fix = (
        "restore it or rebuild with python -m cmpnn_dist.convert"
        if spec.origin == "convert"
        else "fix data_root=... or data.raw_path=..."
    )
    return (
        f"cannot check dataset {path.name} ({path}) against {what}: {exc} "
        f"(built from {record.get('raw_path')}); {fix}, or pass data.allow_missing_source=true "
        "to use the cached copy unchecked"
    )


def _changed(
    record: dict[str, Any], spec: BuildSpec, files: dict[str, Path]
) -> tuple[str, dict[str, Any] | None]:
    """``(reason, updated)``: the first difference between the record and ``spec`` / the files
    now as one phrase ("" when current); ``updated`` is the record with new mtimes / raw path
    when only those moved (None when nothing needs writing back)."""
    version = record.get("converter_version")
    if version != CONVERTER_VERSION:
        return f"converter version {version} -> {CONVERTER_VERSION}", None
    old, new = record.get("params", {}), spec.params()
    for key in new:
        if old.get(key) != new[key]:
            return f"data.{key} {old.get(key)!r} -> {new[key]!r}", None
    recorded = record.get("files", {})
    added, removed = sorted(set(files) - set(recorded)), sorted(set(recorded) - set(files))
    if added or removed:
        parts = [f"{k} added" for k in added] + [f"{k} removed" for k in removed]
        more = " ..." if len(parts) > 3 else ""
        return f"raw files changed: {', '.join(parts[:3])}{more}", None
    refreshed: dict[str, dict[str, Any]] = {}
    for key, p in files.items():
        st, rec = p.stat(), recorded[key]
        if st.st_size != rec["size"]:
            return f"{p} changed ({rec['size']} -> {st.st_size} bytes)", None
        if st.st_mtime_ns != rec["mtime_ns"]:
            if fmt.sha256_file(p) != rec["sha256"]:
                return f"{p} changed (same size, new content)", None
            refreshed[key] = {**rec, "mtime_ns": st.st_mtime_ns}
    if not refreshed and record.get("raw_path") == spec.raw_path:
        return "", None
    updated = {**record, "files": {**recorded, **refreshed}, "raw_path": spec.raw_path}
    return "", updated


def _rewrite_manifest(path: Path, manifest: dict[str, Any]) -> None:
    """Replace ``path/manifest.json`` atomically; a read-only dataset folder is left alone
    (the next open hashes again)."""
    tmp = path / f".{fmt.MANIFEST}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path / fmt.MANIFEST)
    except OSError:
        tmp.unlink(missing_ok=True)
