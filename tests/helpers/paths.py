"""Where the tests find the repository and the read-only reference graphs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


def running_in_ci() -> bool:
    """True where the environment says CI (``CI=true``, as CI services and ``.ci/run`` set)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_shared_data(folder: Path = SHARED_DATA) -> Path:
    """``folder`` when it exists.  Absent: a failure in CI, where the reference graphs are
    always there (a skip would hide every test that reads them), else a skip saying so."""
    if not folder.is_dir():
        message = f"reference data folder {folder} is absent"
        if running_in_ci():
            pytest.fail(f"{message}, and CI=true: CI must provide it")
        pytest.skip(message)
    return folder
