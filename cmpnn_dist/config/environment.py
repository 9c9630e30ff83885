"""What the schema's defaults read from the environment: the default storage root.

``Config.storage_root`` defaults to :func:`default_storage_root`, evaluated when a config is
made (not at import), so ``$CMPNN_STORAGE_ROOT`` set after import still counts.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_STORAGE_ROOT = "CMPNN_STORAGE_ROOT"
RAY_WORKING_DIR_MARK = "runtime_resources/working_dir_files"


def in_ray_working_dir(path: Path | None = None) -> bool:
    """True when ``path`` (default: the working dir) is a ``ray job --working-dir`` copy."""
    return RAY_WORKING_DIR_MARK in str(path or Path.cwd())


def default_storage_root() -> str:
    """``$CMPNN_STORAGE_ROOT``, else ``./storage`` -- or ``~/cmpnn_dist/storage`` inside a
    ``ray job submit --working-dir`` copy, which vanishes with the cluster; absolute."""
    env = os.environ.get(ENV_STORAGE_ROOT)
    if env:
        return env if "://" in env else str(Path(env).expanduser().resolve())
    if in_ray_working_dir():
        return str(Path.home() / "cmpnn_dist" / "storage")
    return str(Path.cwd() / "storage")
