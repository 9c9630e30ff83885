"""The output folder of a batch-scoring job: a manifest and Parquet parts written whole.

    out/_job.json          the job's parameters (checkpoint weights' digest, relation, heads,
                           top_k, known, graph, part_size, number of queries)
    out/part-00000.parquet the rows of queries [0, part_size), then the next part_size...

Part ``i`` holds the rows of queries ``[i * part_size, (i + 1) * part_size)`` of the job's
head list, by query then rank.  Each is encoded in memory and written under a temporary
name, then renamed (:func:`~cmpnn_dist.storage.atomic.write_atomic`), so a part either
exists whole or not at all.  A job run again with the same parameters skips the parts that
exist (a killed job continues where it stopped, and no row is written twice); with other
parameters it is one error naming the first difference.  Names starting with ``_`` or ``.``
are skipped by Parquet dataset readers, so ``pandas.read_parquet(out)`` reads the rows only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage.atomic import write_atomic

MANIFEST = "_job.json"
FORMAT = 1
PART = re.compile(r"^part-(\d{5,})\.parquet$")


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def digest(values: Any) -> str:
    """sha256 of a JSON-able value (the head id list) or of raw bytes."""
    raw = values if isinstance(values, bytes) else json.dumps(values).encode()
    return hashlib.sha256(raw).hexdigest()


def weights_digest(params: dict[str, Any]) -> str:
    """sha256 over a state dict's names and tensor bytes: which weights scored the rows."""
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(params[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class JobFolder:
    """``out`` and its manifest; :meth:`open` checks or writes the manifest."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def check(self, params: dict[str, Any]) -> list[int]:
        """Before anything is written: the indices of finished parts when ``out`` holds this
        very job, [] when ``out`` is new or empty; UsageError when ``out`` holds something
        else (another job, or files that are not a job's)."""
        out = self.out
        if out.exists() and not out.is_dir():
            raise UsageError(f"out={out} is a file; give a folder for the Parquet parts")
        if not out.parent.is_dir():
            raise UsageError(f"out={out}: folder {out.parent} does not exist")
        if not out.is_dir():
            return []
        manifest = out / MANIFEST
        files = [p for p in out.iterdir() if not p.name.startswith(".")]
        if not manifest.is_file():
            if files:
                raise UsageError(
                    f"out={out} holds files but no {MANIFEST}: not a batch-scoring output; "
                    "give a new or empty folder"
                )
            return []
        try:
            saved = json.loads(manifest.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{manifest}: unreadable ({exc})") from None
        for key, value in params.items():
            if saved.get(key) != value:
                raise UsageError(
                    f"out={out} holds a job with other parameters ({key}: {saved.get(key)!r} "
                    f"there, {value!r} here); rerun with the same parameters to continue it, "
                    "or give another out="
                )
        done = []
        for p in files:
            m = PART.match(p.name)
            if m:
                index = int(m.group(1))
                if index >= params["num_parts"]:
                    raise UsageError(f"{p}: part {index} of a job of {params['num_parts']} parts")
                done.append(index)
        return sorted(done)

    def open(self, params: dict[str, Any]) -> None:
        """Create ``out`` with its manifest (kept as is when present: :meth:`check` has
        compared it); remove temporary files a killed job left."""
        self.out.mkdir(exist_ok=True)
        for p in self.out.iterdir():
            if p.name.startswith(".part-") and ".tmp-" in p.name:
                os.unlink(p)
        if not (self.out / MANIFEST).is_file():
            write_atomic(self.out / MANIFEST, json.dumps({"format": FORMAT, **params}, indent=1))

    def write_part(self, index: int, table: pa.Table) -> Path:
        """Part ``index``, encoded in memory, then written whole (temp name, rename)."""
        buf = io.BytesIO()
        pq.write_table(table, buf)
        return write_atomic(self.out / part_name(index), buf.getvalue())
