"""What a folder holds, to compare before and after."""

from __future__ import annotations

from pathlib import Path


def snapshot(folder: Path) -> list[tuple[str, int, int, int]]:
    """Every file and folder under ``folder``: (relative path, inode, size, mtime in ns)."""
    out = []
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out.append((p.relative_to(folder).as_posix(), st.st_ino, st.st_size, st.st_mtime_ns))
    return out
