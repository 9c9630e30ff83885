"""Content checks of a dataset's files before their bytes are used: sha256, once per content.

:func:`check_content` compares each file an open will map with the sha256 in
``manifest.json``.  Hashing every byte on every open multiplies the open time of a
biokg-scale dataset many times over (``benchmarks/storage/shard_verify.py``,
``benchmarks/results/storage/shard_verify_cpu.md``: the open itself maps the files without reading
them), and every Ray worker, ``evaluate`` and ``predict`` call would pay it again.  So a full
check is remembered in a *verification stamp*, ``<dataset>/.verified.json``, written
atomically (temp name, then rename) after the file hashed clean::

    {"format": 1, "files": {"graphs/train/csr_00000.arrow":
        {"size": ..., "mtime_ns": ..., "ctime_ns": ..., "ino": ..., "sha256": "<manifest's>"}}}

A later open trusts a file without reading it only when its ``stat`` still shows the same
size, mtime, ctime and inode and the stamp's sha256 is the manifest's; otherwise it hashes
the file again (and refreshes its entry).  A file changed less than :data:`SETTLE_NS` before
its check is hashed but not stamped: a write in the same timestamp tick as the check
(coarse kernel clocks, 1-2 s on some filesystems) could otherwise leave the stat unchanged.
A folder that cannot be written (read-only share) gets no stamp: every open hashes.

Threat model: accidental corruption through the filesystem (a tool or a person editing a
file, a copy or sync that went wrong, a byte flipped by a program).  Any such write changes
the file's ctime, which no user call can set back (``os.utime`` restores atime and mtime
only), so a changed file is always hashed again.  Not covered: an adversary (who could
rewrite ``manifest.json`` and the stamp as well) and corruption below the filesystem (bit
rot on the medium changes no ``stat``) after the first check;
``python -m cmpnn_dist.storage verify PATH`` hashes every file whatever the stamp says.
"""

from __future__ import annotations

import json
import os
import shlex
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cmpnn_dist.storage import format as fmt
from cmpnn_dist.storage.errors import StorageError

STAMP = ".verified.json"
STAMP_FORMAT = 1
MODES = ("stamp", "full", "none")
# a file whose ctime is newer than this (ns) at its check is hashed but not stamped
SETTLE_NS = 2_000_000_000


def _stat_key(st: os.stat_result) -> dict[str, int]:
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
    }


def read_stamp(root: Path) -> dict[str, dict[str, Any]]:
    """The stamp's entries (``{}`` when absent, unreadable or of another format)."""
    try:
        data = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != STAMP_FORMAT:
        return {}
    files = data.get("files")
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(v, dict)}


def write_stamp(root: Path, files: dict[str, dict[str, Any]]) -> bool:
    """Replace the stamp atomically; False (and nothing left behind) when the folder cannot
    be written."""
    tmp = root / f".{STAMP}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"format": STAMP_FORMAT, "files": files}, f, indent=1, sort_keys=True)
        os.replace(tmp, root / STAMP)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def rebuild_hint(root: Path, manifest: dict[str, Any]) -> str:
    """How to rebuild the dataset at ``root``, as one phrase (a command where there is one).

    Datasets built for a config (``train`` / ``evaluate`` / ``predict``) are a cache keyed by
    their source: the same command with ``data.rebuild=true`` rebuilds them.  Datasets built
    by ``python -m cmpnn_dist.convert`` are rebuilt by the same convert command, which the
    manifest's source record holds."""
    source = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    record = source.get("record") if isinstance(source.get("record"), dict) else None
    if record is None:
        return f"delete {root} and rerun the command that built it"
    if record.get("origin") != "convert":
        return "rerun the same command with data.rebuild=true added"
    params = record.get("params") or {}
    cmd = ["python", "-m", "cmpnn_dist.convert", str(params.get("source")), str(root)]
    if record.get("raw_path"):
        cmd += ["--raw", str(record["raw_path"])]
    cmd += ["--shards", str(params.get("num_shards", 4)), "--name", str(manifest.get("name"))]
    if params.get("drop_unseen_entities"):
        cmd.append("--drop-unseen-entities")
    if params.get("keep_unseen_entities"):
        cmd.append("--keep-unseen-entities")
    if params.get("node_types"):
        cmd += ["--node-types", str(params["node_types"])]
    for key, value in sorted((params.get("synthetic") or {}).items()):
        cmd += ["--param", f"{key}={json.dumps(value)}"]
    return shlex.join(cmd)


def check_content(
    root: Path, manifest: dict[str, Any], names: Iterable[str], mode: str = "stamp"
) -> list[str]:
    """Check the sha256 of files ``names`` (keys of ``manifest["files"]``) under ``root``.

    Args:
        mode: ``"stamp"`` hashes a file unless the stamp vouches for its current content (see
            the module docstring); ``"full"`` hashes every file; ``"none"`` checks nothing.

    Returns the names that were hashed (stamp hits are not).  Raises StorageError naming the
    first file whose content differs from the manifest, with the command that rebuilds the
    dataset.  Stamps are refreshed after a clean check in modes ``stamp`` and ``full``.
    """
    if mode not in MODES:
        raise ValueError(f"verify mode must be one of {MODES}, got {mode!r}")
    if mode == "none":
        return []
    old = read_stamp(root)
    new = {k: v for k, v in old.items() if k in manifest["files"]}
    hashed = []
    for name in names:
        expected = manifest["files"][name]["sha256"]
        path = root / name
        now = time.time_ns()
        st = os.stat(path)
        key = {**_stat_key(st), "sha256": expected}
        if mode == "stamp" and old.get(name) == key:
            continue
        digest = fmt.sha256_file(path)
        hashed.append(name)
        if digest != expected:
            raise StorageError(
                f"sha256 {digest[:16]}... differs from the manifest's {expected[:16]}... "
                f"(the file changed after the dataset was built); rebuild the dataset: "
                f"{rebuild_hint(root, manifest)}",
                path,
            )
        if now - st.st_ctime_ns > SETTLE_NS:
            new[name] = key
        else:
            new.pop(name, None)
    if new != old:
        write_stamp(root, new)
    return hashed
