"""Files written whole, and a full disk as one error naming the path (storage/atomic.py).

The disk is really full here: a 64 KiB tmpfs mounted in a user and mount namespace
(``unshare -rm``), so the kernel writes what fits and then fails with ENOSPC, the partial
write a real full disk gives.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from cmpnn_dist.storage.atomic import (
    append_text,
    describe,
    failing_writes,
    human_bytes,
    write_atomic,
)
from cmpnn_dist.storage.errors import WriteError
from tests.helpers.real_run import REPO

CHILD = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from cmpnn_dist.storage.atomic import append_text, free_bytes, write_atomic
    from cmpnn_dist.storage.errors import WriteError

    d = Path(sys.argv[1])
    out = {"free_before": free_bytes(d)}
    log = d / "metrics.csv"
    log.write_text("kind,step\\n")
    try:
        append_text(log, "train,1\\n" * 25_000)  # 200,000 bytes into a 64 KiB filesystem
    except WriteError as e:
        out["append_error"] = str(e)
    out["log"] = log.read_text()
    res = d / "results.json"
    res.write_text('{"old": true}')
    try:
        write_atomic(res, "x" * 200_000)
    except WriteError as e:
        out["atomic_error"] = str(e)
    out["results"] = res.read_text()
    out["files"] = sorted(os.listdir(d))
    print(json.dumps(out))
    """
)


def _tmpfs_child(tmp_path) -> subprocess.CompletedProcess:
    mnt = tmp_path / "full"
    mnt.mkdir()
    script = f'mount -t tmpfs -o size=64k tmpfs "{mnt}" && exec "$0" -c "$1" "{mnt}"'
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, sys.executable, CHILD],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.integration
def test_full_tmpfs_append_cut_back_and_atomic_write_untouched(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a small tmpfs in a user namespace")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.strip()}")
    proc = _tmpfs_child(tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    mnt = tmp_path / "full"
    assert out["free_before"] == 64 * 1024
    # the append wrote what fitted, then failed: the file is cut back to its old content
    assert out["log"] == "kind,step\n"
    assert out["append_error"].startswith(f"{mnt}/metrics.csv: cannot write: no space left")
    assert "writing 200,000 bytes (" in out["append_error"]
    assert "free on its filesystem); free space, then rerun" in out["append_error"]
    # the atomic write failed half way: the old file is intact, no temporary file is left
    assert out["results"] == '{"old": true}'
    assert out["atomic_error"].startswith(f"{mnt}/results.json: cannot write: no space left")
    assert out["files"] == ["metrics.csv", "results.json"]


def test_write_atomic_replaces_whole(tmp_path):
    path = tmp_path / "sub" / "results.json"
    write_atomic(path, '{"a": 1}')
    write_atomic(path, b'{"a": 2}', fsync=True)
    assert path.read_text() == '{"a": 2}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]
    append_text(tmp_path / "log.csv", "a\n")
    append_text(tmp_path / "log.csv", "b\n")
    assert (tmp_path / "log.csv").read_text() == "a\nb\n"


def test_failing_writes_names_the_path_and_sizes(tmp_path):
    """/dev/full fails every write with ENOSPC."""
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(WriteError) as info:
            with failing_writes(tmp_path / "ranks.parquet", 3 * 2**20):
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'ranks.parquet'}: cannot write: no space left")
    assert "writing 3.0 MiB (" in message and "\n" not in message
    # errors a retry may fix are not turned into user errors
    with pytest.raises(OSError) as other:
        with failing_writes(tmp_path / "x"):
            raise OSError(errno.EINTR, "interrupted")
    assert not isinstance(other.value, WriteError)
    assert describe(OSError(errno.EROFS, "Read-only file system"), tmp_path).startswith(
        "Read-only file system; fix the folder's permissions"
    )
    assert [human_bytes(n) for n in (999, 3 * 2**20, 5 * 2**30)] == [
        "999 bytes",
        "3.0 MiB",
        "5.0 GiB",
    ]
