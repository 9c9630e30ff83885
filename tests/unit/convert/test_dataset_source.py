"""The dataset cache records its source and is rebuilt (or refused) when the source changed.

Real files throughout: a small TSV graph in tmp_path, converted by the real converter into a
real storage root, opened with the real reader.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from cmpnn_dist.cli.common import compose_config, run_cli
from cmpnn_dist.convert import build_dataset
from cmpnn_dist.convert import provenance as src
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import open_dataset
from cmpnn_dist.training.data import load_train_data

TRAIN = [
    ("a", "likes", "b"),
    ("b", "likes", "c"),
    ("c", "likes", "d"),
    ("d", "knows", "a"),
    ("a", "knows", "c"),
    ("e", "likes", "a"),
]
VALID = [("b", "knows", "d")]
TEST = [("c", "knows", "e")]


def write_tsv(path: Path, rows: list[tuple[str, str, str]]) -> None:
    path.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows))


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    folder = tmp_path / "mini_raw"
    folder.mkdir()
    write_tsv(folder / "train.txt", TRAIN)
    write_tsv(folder / "valid.txt", VALID)
    write_tsv(folder / "test.txt", TEST)
    return folder


def overrides(tmp_path: Path, raw: Path, *extra: str) -> list[str]:
    return [
        f"storage_root={tmp_path / 'storage'}",
        "data.name=mini",
        "data.source=tsv:transductive",
        f"data.raw_path={raw}",
        "data.num_shards=1",
        *extra,
    ]


def config(tmp_path: Path, raw: Path, *extra: str):  # noqa: ANN201
    return compose_config("default", overrides(tmp_path, raw, *extra))


def record(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())["source"]["record"]


def train_facts(path: Path) -> set[tuple[str, str, str]]:
    """The training facts the trainer would see, as names."""
    ds = open_dataset(path)
    names = ds.graph_data("train").entity_names
    rels = ds.relation_names
    q = load_train_data(ds).train.queries
    return {(names[h], rels[r], names[t]) for h, r, t in q.tolist()}


def test_record_lists_every_raw_file_with_its_hash(tmp_path, raw):
    path = ensure_dataset(config(tmp_path, raw))
    rec = record(path)
    assert rec["converter_version"] == src.CONVERTER_VERSION
    assert rec["origin"] == "config" and rec["raw_path"] == str(raw.resolve())
    assert rec["params"]["num_shards"] == 1 and rec["params"]["source"] == "tsv:transductive"
    assert sorted(rec["files"]) == ["test.txt", "train.txt", "valid.txt"]
    import hashlib

    body = (raw / "train.txt").read_bytes()
    assert rec["files"]["train.txt"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert rec["files"]["train.txt"]["size"] == len(body)


def test_unchanged_source_is_not_rebuilt_and_not_hashed(tmp_path, raw, monkeypatch):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    hashed: list[Path] = []  # raw files hashed (the dataset's own files are content-checked)
    real = src.fmt.sha256_file
    monkeypatch.setattr(
        src.fmt, "sha256_file", lambda p: (raw in Path(p).parents and hashed.append(p)) or real(p)
    )
    assert ensure_dataset(config(tmp_path, raw)) == path
    assert record(path)["build_id"] == first
    assert hashed == []  # same size and mtime: a stat, no hash

    # touched (new mtime, same bytes): hashed once, not rebuilt, and the new mtime remembered
    st = (raw / "train.txt").stat()
    os.utime(raw / "train.txt", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    ensure_dataset(config(tmp_path, raw))
    assert record(path)["build_id"] == first
    assert [p.name for p in hashed] == ["train.txt"]
    assert record(path)["files"]["train.txt"]["mtime_ns"] == st.st_mtime_ns + 10**9
    hashed.clear()
    ensure_dataset(config(tmp_path, raw))
    assert hashed == [] and record(path)["build_id"] == first


def test_changed_tsv_is_rebuilt_and_the_new_fact_is_trained_on(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    new_fact = ("e", "knows", "b")
    assert new_fact not in train_facts(path)
    old_size = (raw / "train.txt").stat().st_size
    write_tsv(raw / "train.txt", [*TRAIN, new_fact])
    new_size = (raw / "train.txt").stat().st_size
    capsys.readouterr()
    ensure_dataset(config(tmp_path, raw))
    err = capsys.readouterr().err.strip().splitlines()
    train_file = raw.resolve() / "train.txt"
    assert err == [
        f"rebuilding dataset mini: {train_file} changed ({old_size} -> {new_size} bytes)"
    ]
    assert record(path)["build_id"] != first
    assert new_fact in train_facts(path)
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_same_size_edit_is_caught_by_the_hash(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    swapped = [("a", "likes", "b"), ("b", "likes", "c"), ("c", "likes", "d"), ("d", "knows", "a")]
    swapped += [("a", "knows", "c"), ("a", "likes", "e")]  # e likes a -> a likes e: same bytes
    write_tsv(raw / "train.txt", swapped)
    assert (raw / "train.txt").stat().st_size == record(path)["files"]["train.txt"]["size"]
    capsys.readouterr()
    ensure_dataset(config(tmp_path, raw))
    assert "changed (same size, new content)" in capsys.readouterr().err
    assert record(path)["build_id"] != first
    assert ("a", "likes", "e") in train_facts(path) and ("e", "likes", "a") not in train_facts(path)


def test_changed_config_key_rebuilds(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    assert len(open_dataset(path).manifest["graphs"]["train"]["shards"]) == 1
    capsys.readouterr()
    ensure_dataset(config(tmp_path, raw, "data.num_shards=2"))
    assert "data.num_shards 1 -> 2" in capsys.readouterr().err
    assert len(open_dataset(path).manifest["graphs"]["train"]["shards"]) == 2


def test_rebuild_true_forces_a_rebuild(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    capsys.readouterr()
    ensure_dataset(config(tmp_path, raw, "data.rebuild=true"))
    assert capsys.readouterr().err.strip() == "rebuilding dataset mini: data.rebuild=true"
    assert record(path)["build_id"] != first
    open_dataset(path, verify=True)


def test_missing_source_is_one_line_exit_2_through_the_cli(tmp_path, raw, capsys):
    from cmpnn_dist.cli.train import _main

    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    gone = tmp_path / "nope"
    capsys.readouterr()
    rc = run_cli(_main, overrides(tmp_path, gone, "train.max_steps=1"))
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot check dataset mini")
    assert f"{gone} does not exist" in lines[0] and f"built from {raw.resolve()}" in lines[0]
    assert "data_root=" in lines[0] and "data.allow_missing_source=true" in lines[0]
    assert not (tmp_path / "storage" / "runs").exists()  # nothing started
    assert record(path)["build_id"] == first  # and the cached copy is untouched

    # a file of the source gone: same rule, naming the file
    (raw / "valid.txt").unlink()
    with pytest.raises(UsageError, match=r"valid\.txt does not exist \(nor valid\.tsv\)"):
        ensure_dataset(config(tmp_path, raw))


def test_missing_source_with_explicit_opt_in_uses_the_cache(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    capsys.readouterr()
    got = ensure_dataset(config(tmp_path, tmp_path / "nope", "data.allow_missing_source=true"))
    assert got == path and record(path)["build_id"] == first
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: cannot check dataset mini")


def test_moved_source_with_same_content_is_not_rebuilt(tmp_path, raw):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    moved = tmp_path / "elsewhere"
    raw.rename(moved)  # same bytes, same mtimes, new place
    ensure_dataset(config(tmp_path, moved))
    assert record(path)["build_id"] == first and record(path)["raw_path"] == str(moved)


def test_failed_rebuild_keeps_the_old_dataset(tmp_path, raw):
    path = ensure_dataset(config(tmp_path, raw))
    first = record(path)["build_id"]
    (raw / "train.txt").write_text("a\tlikes\n")  # a bad line: the conversion fails
    with pytest.raises(UsageError, match="line 1"):
        ensure_dataset(config(tmp_path, raw))
    assert record(path)["build_id"] == first
    open_dataset(path, verify=True)  # the complete old copy is still there
    assert not [p.name for p in path.parent.iterdir() if p.name.startswith(".")]


def test_convert_cli_dataset_is_checked_against_its_own_source(tmp_path, raw, capsys):
    """``convert ... && train data.name=NAME`` (config source left at its default): the
    dataset is checked against the source it was converted from, and rebuilt from it."""
    path = tmp_path / "storage" / "datasets" / "mine"
    build_dataset("tsv:transductive", path, raw_path=raw, num_shards=1, name="mine_graph")
    first = record(path)["build_id"]
    cfg = compose_config("default", [f"storage_root={tmp_path / 'storage'}", "data.name=mine"])
    assert cfg.data.source == "synthetic:rule_kg"
    assert ensure_dataset(cfg) == path and record(path)["build_id"] == first
    write_tsv(raw / "train.txt", [*TRAIN, ("e", "knows", "b")])
    capsys.readouterr()
    ensure_dataset(cfg)
    assert "rebuilding dataset mine:" in capsys.readouterr().err
    rec = record(path)
    assert rec["build_id"] != first and rec["origin"] == "convert"
    assert rec["params"]["source"] == "tsv:transductive"
    assert open_dataset(path).name == "mine_graph"
    assert ("e", "knows", "b") in train_facts(path)


def test_legacy_dataset_without_record(tmp_path, raw, capsys):
    path = ensure_dataset(config(tmp_path, raw))
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["source"]["record"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    with pytest.raises(UsageError, match="does not exist"):  # no source: not rebuilt either
        ensure_dataset(config(tmp_path, tmp_path / "nope"))
    ensure_dataset(config(tmp_path, raw))  # same source as the config: rebuilt once
    assert "before source records existed" in capsys.readouterr().err
    assert "record" in json.loads((path / "manifest.json").read_text())["source"]

    # converted from another source than the config names (no record): used, with a note
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["source"]["record"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    cfg = compose_config("default", [f"storage_root={tmp_path / 'storage'}", "data.name=mini"])
    assert ensure_dataset(cfg) == path
    err = capsys.readouterr().err
    assert "was built from tsv:transductive before source records existed; used as is" in err
    assert "record" not in json.loads((path / "manifest.json").read_text())["source"]


def test_synthetic_params_are_recorded_and_compared(tmp_path, capsys):
    base = [f"storage_root={tmp_path}"]
    cfg = compose_config("trisqr", [*base, "+data.synthetic.num_pairs=4"])
    path = ensure_dataset(cfg)
    assert record(path)["params"]["synthetic"] == {"num_pairs": 4}
    assert record(path)["files"] == {} and record(path)["raw_path"] is None
    first = record(path)["build_id"]
    ensure_dataset(compose_config("trisqr", [*base, "+data.synthetic.num_pairs=4"]))
    assert record(path)["build_id"] == first
    capsys.readouterr()
    ensure_dataset(compose_config("trisqr", [*base, "+data.synthetic.num_pairs=6"]))
    assert "data.synthetic {'num_pairs': 4} -> {'num_pairs': 6}" in capsys.readouterr().err
    assert torch.is_tensor(load_train_data(open_dataset(path)).test.queries)


def test_fb237_with_a_wrong_data_root_is_refused(tmp_path, shared_data):
    """``conf=fb237_ind_v1 data_root=/nope`` with a cached copy: refused, not trained on it."""
    from cmpnn_dist.cli.train import _main

    storage = f"storage_root={tmp_path}"
    path = ensure_dataset(compose_config("fb237_ind_v1", [storage]))
    assert sorted(record(path)["files"]) == [
        "../fb237_v1_ind/test.txt", "../fb237_v1_ind/train.txt", "../fb237_v1_ind/valid.txt",
        "test.txt", "train.txt", "valid.txt",
    ]  # fmt: skip
    with pytest.raises(UsageError, match=r"/nope/inductive/fb237_v1 does not exist"):
        ensure_dataset(compose_config("fb237_ind_v1", [storage, "data_root=/nope"]))
    assert run_cli(_main, ["conf=fb237_ind_v1", storage, "data_root=/nope"]) == 2
