"""Graph store: damaged datasets are refused with an error naming the file; atomic writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.storage import GraphSpec, StorageError, open_dataset, verify_dataset, write_dataset
from cmpnn_dist.storage.format import MANIFEST, sha256_file
from cmpnn_dist.storage.writer import _csr_table, _write_table
from tests.helpers.fixtures_storage import random_facts

N, R = 40, 3


@pytest.fixture
def dataset(tmp_path):
    facts = random_facts(np.random.default_rng(0), N, R, 300)
    g = GraphSpec(N, [f"e{i}" for i in range(N)], None, {"train": facts, "valid": facts[:5]})
    return write_dataset(
        tmp_path / "ds",
        name="ds",
        relation_names=["a", "b", "c"],
        graphs={"train": g},
        inductive=False,
        num_shards=2,
    )


def _cli_verify(path):
    return subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.storage", "verify", str(path)],
        capture_output=True,
        text=True,
    )


@pytest.mark.integration
def test_verify_cli_ok(dataset):
    out = _cli_verify(dataset)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["graphs"]["train"]["facts"]["train"] == 300


def test_missing_manifest(dataset):
    (dataset / MANIFEST).unlink()
    with pytest.raises(StorageError, match=r"manifest\.json.*missing manifest\.json"):
        open_dataset(dataset)


def test_unreadable_manifest(dataset):
    (dataset / MANIFEST).write_text("{ not json")
    with pytest.raises(StorageError, match="unreadable manifest"):
        open_dataset(dataset)


def test_not_a_folder(tmp_path):
    with pytest.raises(StorageError, match="no such dataset folder"):
        open_dataset(tmp_path / "nothing")


def test_truncated_shard(dataset):
    shard = dataset / "graphs/train/csr_00001.arrow"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    with pytest.raises(StorageError, match=r"csr_00001\.arrow.*truncated or altered"):
        open_dataset(dataset)


def test_missing_file(dataset):
    (dataset / "graphs/train/facts_valid.arrow").unlink()
    with pytest.raises(StorageError, match=r"facts_valid\.arrow.*missing"):
        open_dataset(dataset)


@pytest.mark.integration
def test_altered_shard_detected_by_checksum(dataset):
    shard = dataset / "graphs/train/csr_00000.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the sha256 notices for sure
    shard.write_bytes(bytes(data))
    open_dataset(dataset, verify="none")  # sizes and the manifest still check out
    for verify in ("stamp", "full"):
        with pytest.raises(StorageError, match=r"csr_00000\.arrow: sha256 .* rebuild the dataset"):
            open_dataset(dataset, verify=verify)
    out = _cli_verify(dataset)
    assert out.returncode == 2 and "csr_00000.arrow" in out.stderr and "sha256" in out.stderr


def _replace_shard(dataset, indptr, src, rel):
    """Swap shard 0 for a well-formed Arrow file with the given content and record its size
    and sha256 in the manifest (a dataset whose manifest vouches for a bad file, as a faulty
    writer would leave it: only the structural checks can refuse it)."""
    shard = dataset / "graphs/train/csr_00000.arrow"
    _write_table(shard, _csr_table(np.asarray(indptr), np.asarray(src), np.asarray(rel)))
    m = json.loads((dataset / MANIFEST).read_text())
    m["files"]["graphs/train/csr_00000.arrow"]["bytes"] = shard.stat().st_size
    m["files"]["graphs/train/csr_00000.arrow"]["sha256"] = sha256_file(shard)
    (dataset / MANIFEST).write_text(json.dumps(m))
    return m["graphs"]["train"]["shards"][0]


def test_structural_checks_on_open(dataset):
    ds = open_dataset(dataset)
    s0 = ds.graph_data().shards()[0]
    rows, e = s0.node_end - s0.node_start, s0.num_edges
    indptr, src, rel = s0.indptr.numpy().copy(), s0.src.numpy().copy(), s0.rel.numpy().copy()
    bad_src = src.copy()
    bad_src[-1] = N + 5
    _replace_shard(dataset, indptr, bad_src, rel)
    with pytest.raises(StorageError, match=r"csr_00000\.arrow.*source id out of range"):
        open_dataset(dataset).graph_data().shards()
    bad_rel = rel.copy()
    bad_rel[0] = 2 * R
    _replace_shard(dataset, indptr, src, bad_rel)
    with pytest.raises(StorageError, match="relation id out of range"):
        open_dataset(dataset).graph_data().shards()
    bad_ptr = indptr.copy()
    bad_ptr[rows // 2] = e + 1  # not monotone (and past the end)
    bad_ptr[-1] = e
    _replace_shard(dataset, bad_ptr, src, rel)
    with pytest.raises(StorageError, match="not monotone"):
        open_dataset(dataset).graph_data().shards()
    _replace_shard(dataset, indptr[:-1], src[: indptr[-2]], rel[: indptr[-2]])
    with pytest.raises(StorageError, match="rows, manifest says"):
        open_dataset(dataset).graph_data().shards()


def test_garbage_file_same_size(dataset):
    shard = dataset / "graphs/train/csr_00001.arrow"
    shard.write_bytes(b"\0" * shard.stat().st_size)
    with pytest.raises(StorageError, match=r"csr_00001\.arrow: sha256"):
        open_dataset(dataset)
    # without the content check, mapping it is refused too
    with pytest.raises(StorageError, match=r"csr_00001\.arrow.*unreadable Arrow IPC"):
        open_dataset(dataset, verify="none").graph_data().shards()


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import cmpnn_dist.storage.writer as w
    stage = sys.argv[2]
    if stage == "before_manifest":
        w._write_manifest = lambda tmp, m: os.kill(os.getpid(), signal.SIGKILL)
    else:  # after the folder rename, before the manifest is published
        real = os.replace
        def replace(a, b):
            if str(b).endswith("manifest.json"):
                os.kill(os.getpid(), signal.SIGKILL)
            return real(a, b)
        w.os.replace = replace
    from cmpnn_dist.convert import build_dataset
    build_dataset("synthetic:rule_kg", sys.argv[1], synthetic={"num_entities": 200})
""")


@pytest.mark.integration
@pytest.mark.parametrize(
    "stage,existing",
    [("before_manifest", False), ("before_publish", False), ("before_publish", True)],
)
def test_killed_conversion_leaves_nothing_that_opens(tmp_path, stage, existing):
    """Killed at the two critical points: the killed run's output never opens; a previous
    complete dataset being replaced is either still intact or already gone, never mixed."""
    out = tmp_path / "rule_kg"
    if existing:  # a previous complete dataset (100 entities) is being rebuilt
        build_dataset("synthetic:rule_kg", out, synthetic={"num_entities": 100})
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(out), stage], capture_output=True, text=True
    )
    assert proc.returncode == -9, proc.stderr
    folders = [out, *tmp_path.iterdir()]
    assert len(folders) >= 2  # the killed run did leave something behind
    opened = []
    for folder in folders:
        try:
            ds = open_dataset(folder)
        except StorageError:
            continue
        opened.append(folder)
        assert existing and ds.graph_data().num_nodes == 100  # only the old, complete one
        verify_dataset(folder)
    assert len(opened) <= 1
    # a rerun succeeds and replaces whatever the killed run left behind
    path = build_dataset("synthetic:rule_kg", out, synthetic={"num_entities": 200})
    assert verify_dataset(path)["graphs"]["train"]["nodes"] == 200


def test_manifest_checksums_match_files(dataset):
    m = json.loads((dataset / MANIFEST).read_text())
    files = sorted(
        p.relative_to(dataset).as_posix()
        for p in dataset.rglob("*")
        if p.is_file() and p.name != MANIFEST
    )
    assert sorted(m["files"]) == files
    for rel, info in m["files"].items():
        assert sha256_file(dataset / rel) == info["sha256"]
        assert os.path.getsize(dataset / rel) == info["bytes"]
