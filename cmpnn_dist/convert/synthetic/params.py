"""Parameter handling shared by the synthetic generators."""

from __future__ import annotations

from typing import Any

from cmpnn_dist.storage.errors import StorageError


def merge_params(defaults: dict[str, Any], given: dict[str, Any] | None, what: str) -> dict:
    """``defaults`` updated with ``given``; an unknown key is a StorageError naming it."""
    out = dict(defaults)
    for key, value in (given or {}).items():
        if key not in defaults:
            raise StorageError(
                f"{what}: unknown synthetic parameter {key!r} (known: "
                f"{', '.join(sorted(defaults))})"
            )
        out[key] = value
    return out
