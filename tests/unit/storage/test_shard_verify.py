"""Every graph file's sha256 is checked before its bytes train, once per file content.

A flipped byte in the middle of a shard (same size, mtime set back with ``os.utime``) is
refused by ``train`` and ``evaluate`` with one ``error:`` line naming the file and the
command that rebuilds the dataset, and that command works.  The verification stamp
(``cmpnn_dist.storage.integrity``) spares the hash of unchanged files and is keyed on ctime,
which ``os.utime`` cannot set back.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.storage import GraphSpec, StorageError, integrity, open_dataset, write_dataset
from cmpnn_dist.storage.format import read_manifest
from tests.helpers.fixtures_storage import random_facts
from tests.helpers.real_run import REPO, TINY

SHARD = "graphs/train/csr_00000.arrow"


def flip_middle_byte(path: Path) -> os.stat_result:
    """XOR one byte in the middle of ``path`` in place (same size), then set atime and mtime
    back to what they were; returns the stat before the flip."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(before.st_size // 2)
        byte = f.read(1)[0]
        f.seek(before.st_size // 2)
        f.write(bytes([byte ^ 0x10]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return before


@pytest.fixture
def dataset(tmp_path):
    n = 40
    facts = random_facts(np.random.default_rng(0), n, 3, 300)
    g = GraphSpec(n, [f"e{i}" for i in range(n)], None, {"train": facts, "valid": facts[:5]})
    return write_dataset(
        tmp_path / "ds",
        name="ds",
        relation_names=["a", "b", "c"],
        graphs={"train": g},
        inductive=False,
        num_shards=2,
    )


def test_stamp_spares_the_hash_until_a_file_changes(dataset, monkeypatch):
    monkeypatch.setattr(integrity, "SETTLE_NS", -(10**18))  # files just written count as settled
    manifest = read_manifest(dataset)
    names = list(manifest["files"])
    assert sorted(integrity.check_content(dataset, manifest, names)) == sorted(names)
    assert integrity.check_content(dataset, manifest, names) == []  # every file vouched for
    assert integrity.check_content(dataset, manifest, names, "full") == names  # full: all again

    # touched, same bytes: hashed once, then vouched for again
    shard = dataset / SHARD
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert integrity.check_content(dataset, manifest, names) == [SHARD]
    assert integrity.check_content(dataset, manifest, names) == []

    # one byte flipped, size and mtime restored: a stamp keyed on them would miss it
    before = flip_middle_byte(shard)
    after = shard.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    entry = integrity.read_stamp(dataset)[SHARD]
    assert (entry["size"], entry["mtime_ns"], entry["ino"]) == (
        after.st_size,
        after.st_mtime_ns,
        after.st_ino,
    )
    with pytest.raises(StorageError, match=rf"{SHARD}: sha256 .* rebuild the dataset: delete"):
        integrity.check_content(dataset, manifest, names)
    with pytest.raises(StorageError, match=rf"{SHARD}: sha256"):
        open_dataset(dataset)


def test_files_changed_just_now_are_hashed_every_time(dataset):
    """A file younger than SETTLE_NS is never stamped (a write in the same timestamp tick as
    the check could leave its stat unchanged)."""
    manifest = read_manifest(dataset)
    names = list(manifest["files"])
    for _ in range(2):
        assert sorted(integrity.check_content(dataset, manifest, names)) == sorted(names)
    assert integrity.read_stamp(dataset) == {}


def test_shard_subset_checks_only_its_shards(dataset, monkeypatch):
    monkeypatch.setattr(integrity, "SETTLE_NS", -(10**18))
    flip_middle_byte(dataset / "graphs/train/csr_00001.arrow")
    ds = open_dataset(dataset, shards=[0])  # shard 1 is not mapped: not read, not checked
    assert len(ds.graph_data().shards()) == 1
    with pytest.raises(StorageError, match=r"csr_00001\.arrow: sha256"):
        open_dataset(dataset, shards=[1])


@pytest.mark.integration
def test_converted_dataset_names_the_convert_command_that_rebuilds_it(tmp_path):
    out = build_dataset(
        "synthetic:rule_kg", tmp_path / "rk", synthetic={"num_entities": 120}, num_shards=2
    )
    flip_middle_byte(out / SHARD)
    with pytest.raises(StorageError) as info:
        open_dataset(out)
    message = str(info.value)
    assert message.startswith(f"{out / SHARD}: sha256") and "\n" not in message
    command = message.split("rebuild the dataset: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "cmpnn_dist.convert"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, *argv[1:]], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    ds = open_dataset(out, verify="full")
    assert ds.graph_data().num_nodes == 120


def _cli(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=600,
    )  # fmt: skip


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.integration
def test_flipped_shard_byte_stops_train_and_evaluate_with_one_line(tmp_path, monkeypatch):
    """The real converter builds the default synthetic graph (through ``train``); one byte of
    shard 0 flipped with its mtime restored: ``train`` and ``evaluate`` refuse with one line
    naming the shard and ``data.rebuild=true``; that rebuild trains again."""
    root = tmp_path / "storage"
    args = [f"storage_root={root}", *TINY, "train.max_steps=4", "checkpoint.every_steps=2"]
    first = _cli("cmpnn_dist.train", [*args, "run_name=clean"], tmp_path)
    assert first.returncode == 0, first.stderr
    data = root / "datasets" / "rk300"
    # the stamp of a clean open (counted as settled now) vouches for every file: the flip
    # below must be caught through ctime, not by hashing everything again
    monkeypatch.setattr(integrity, "SETTLE_NS", -(10**18))
    open_dataset(data)
    assert SHARD in integrity.read_stamp(data)
    flip_middle_byte(data / SHARD)

    refused = _cli("cmpnn_dist.train", [*args, "run_name=after_flip"], tmp_path)
    assert refused.returncode == 2, refused.stderr
    lines = _error_lines(refused.stderr)
    assert len(lines) == 1, refused.stderr
    assert f"{data / SHARD}: sha256" in lines[0] and "data.rebuild=true" in lines[0]
    assert not (root / "runs" / "after_flip").exists()

    ckpt = root / "runs" / "clean" / "checkpoints" / "best"
    evaluated = _cli("cmpnn_dist.evaluate", [f"ckpt={ckpt}"], tmp_path)
    assert evaluated.returncode == 2, evaluated.stderr
    lines = _error_lines(evaluated.stderr)
    assert len(lines) == 1 and f"{data / SHARD}: sha256" in lines[0], evaluated.stderr

    rebuilt = _cli("cmpnn_dist.train", [*args, "run_name=rebuilt", "data.rebuild=true"], tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    open_dataset(data, verify="full")
    clean = json.loads((root / "runs" / "clean" / "results.json").read_text())
    again = json.loads((root / "runs" / "rebuilt" / "results.json").read_text())
    assert again["test"] == clean["test"]  # the rebuilt graph is the one built first
