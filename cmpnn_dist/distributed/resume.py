"""Which checkpoint to resume from: the newest ``step_*`` folder of a run whose manifest verifies.

Ray stores the reported checkpoints as ``<run>/step_<s:08d>-<token>`` (the token keeps a
re-reported step, after a fallback past a torn checkpoint, from landing in the torn folder).
The run folder may be local or behind a pyarrow URI; remote checkpoints are fetched into a
local scratch folder before they are verified.
"""

from __future__ import annotations

import logging
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from cmpnn_dist.training.checkpoint import CheckpointError, read_manifest

from . import remote

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = re.compile(r"^step_(\d+)(?:-[0-9a-z]+)?$")


def checkpoint_candidates(run_uri: str) -> list[tuple[int, str]]:
    """``(step, name)`` of the ``step_*`` folders in the run folder, newest step first."""
    found = []
    for name in remote.list_dirs(run_uri):
        m = CHECKPOINT_NAME.match(name)
        if m:
            found.append((int(m.group(1)), name))
    return sorted(found, key=lambda x: (x[0], x[1]), reverse=True)


def fetch_checkpoint(run_uri: str, name: str, scratch: Path) -> Path:
    """A local folder with checkpoint ``name`` (the folder itself when storage is local)."""
    src = remote.join(run_uri, name)
    if not remote.is_uri(src):
        return Path(src)
    fs, path = remote.filesystem(src)
    dst = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    import pyarrow.fs as pafs

    pafs.copy_files(
        path, str(dst), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem()
    )
    return dst


def select_checkpoint(run_uri: str, scratch: Path) -> tuple[Path, dict[str, Any], str] | None:
    """Newest valid checkpoint of the run: ``(local folder, manifest, name)``.

    Torn ones (no manifest, a file missing, truncated or with a wrong sha256) are skipped with
    ``warnings.warn`` and ``logger.warning`` naming them.
    """
    for _, name in checkpoint_candidates(run_uri):
        local = fetch_checkpoint(run_uri, name, scratch)
        try:
            manifest = read_manifest(local, verify_checksums=True)
        except CheckpointError as e:
            msg = f"skipping invalid checkpoint {remote.join(run_uri, name)}: {e}"
            logger.warning(msg)
            warnings.warn(msg, stacklevel=2)
            continue
        return local, manifest, name
    return None
