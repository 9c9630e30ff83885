"""TSV ingestion: transductive and GraIL inductive layouts, node types, every bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.storage import StorageError, open_dataset
from tests.helpers.fixtures_storage import reference_csr, write_tsv


def _random_tsv(folder, rng, n=30, r=4, sizes=(200, 20, 20), dup=0):
    """Random string triples; valid/test only use training entities and relations."""
    ents = [f"ent{rng.integers(1e6)}_{i}" for i in range(n)]
    rels = [f"rel/{i}" for i in range(r)]
    rows = {}
    train = [
        (ents[rng.integers(n)], rels[rng.integers(r)], ents[rng.integers(n)])
        for _ in range(sizes[0])
    ]
    train += train[:dup]
    seen_e = {x for h, _, t in train for x in (h, t)}
    seen_r = {q for _, q, _ in train}
    rows["train"] = train
    for split, size in zip(("valid", "test"), sizes[1:], strict=True):
        rows[split] = [row for row in train[:size]]  # reuse: guaranteed seen
        rows[split] = [(h, q, t) for h, q, t in rows[split] if h in seen_e and q in seen_r]
        write_tsv(folder / f"{split}.txt", rows[split])
    write_tsv(folder / "train.txt", train)
    return rows


def _expected(rows):
    """Direct NumPy construction: sorted vocabularies, first-occurrence de-duplication."""
    ents = sorted({x for h, _, t in rows["train"] for x in (h, t)})
    rels = sorted({q for _, q, _ in rows["train"]})
    e, r = {x: i for i, x in enumerate(ents)}, {x: i for i, x in enumerate(rels)}
    out = {}
    for split, rs in rows.items():
        seen, facts = set(), []
        for h, q, t in rs:
            if (h, q, t) not in seen:
                seen.add((h, q, t))
                facts.append((e[h], r[q], e[t]))
        out[split] = np.array(facts, dtype=np.int64).reshape(-1, 3)
    return ents, rels, out


@pytest.mark.parametrize("seed,shards", [(0, 1), (1, 3), (2, 5)])
def test_tsv_to_tensors_equals_numpy(tmp_path, seed, shards):
    rng = np.random.default_rng(seed)
    rows = _random_tsv(tmp_path / "raw", rng, dup=7)
    ents, rels, facts = _expected(rows)
    ds = open_dataset(
        build_dataset(
            "tsv:transductive", tmp_path / "ds", raw_path=tmp_path / "raw", num_shards=shards
        ),
        verify=True,
    )
    g = ds.graph_data()
    assert ds.relation_names == rels and g.entity_names == ents and not ds.inductive
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(g.facts(split).numpy(), facts[split])
    indptr, src, rel = reference_csr(len(ents), len(rels), facts["train"])
    graph = g.graph()
    np.testing.assert_array_equal(graph.indptr.numpy(), indptr)
    np.testing.assert_array_equal(graph.src.numpy(), src)
    np.testing.assert_array_equal(graph.rel.numpy(), rel)
    assert len(g.shards()) == shards
    assert ds.source["stats"]["duplicates_dropped"]["train"] == 7 + (
        len(rows["train"]) - 7 - len(set(rows["train"]))
    )


def test_duplicates_dropped_and_counted(tmp_path):
    raw = tmp_path / "raw"
    write_tsv(
        raw / "train.txt",
        [("a", "r", "b"), ("b", "r", "c"), ("a", "r", "b"), ("a", "r", "b"), ("c", "s", "a")],
    )
    write_tsv(raw / "valid.txt", [("a", "s", "c"), ("a", "s", "c")])
    write_tsv(raw / "test.txt", [("b", "s", "a")])
    ds = open_dataset(build_dataset("tsv:transductive", tmp_path / "ds", raw_path=raw))
    g = ds.graph_data()
    # first occurrences, file order: a-r-b, b-r-c, c-s-a with a=0,b=1,c=2, r=0,s=1
    assert g.facts("train").tolist() == [[0, 0, 1], [1, 0, 2], [2, 1, 0]]
    assert g.facts("valid").tolist() == [[0, 1, 2]]
    assert ds.source["stats"]["duplicates_dropped"] == {"train": 2, "valid": 1, "test": 0}
    assert g.graph().num_edges == 6


@pytest.mark.parametrize(
    "bad_line,line_no,what",
    [
        ("a\tr", 2, "expected 3 tab-separated fields, got 2"),
        ("a\tr\tb\tc", 3, "expected 3 tab-separated fields, got 4"),
        ("a\t\tb", 2, "empty field"),
        ("\tr\tb", 3, "empty field"),
    ],
)
def test_malformed_line(tmp_path, bad_line, line_no, what):
    raw = tmp_path / "raw"
    lines = [("a", "r", "b"), ("b", "r", "c"), ("c", "r", "a")]
    lines.insert(line_no - 1, bad_line)
    write_tsv(raw / "train.txt", [x if isinstance(x, str) else "\t".join(x) for x in lines])
    write_tsv(raw / "valid.txt", [("a", "r", "c")])
    write_tsv(raw / "test.txt", [("a", "r", "c")])
    with pytest.raises(StorageError) as err:
        build_dataset("tsv:transductive", tmp_path / "ds", raw_path=raw)
    msg = str(err.value)
    assert str(raw / "train.txt") in msg and f"line {line_no}:" in msg and what in msg
    assert not (tmp_path / "ds").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]  # nothing half-written


def test_missing_split_file(tmp_path):
    write_tsv(tmp_path / "raw" / "train.txt", [("a", "r", "b")])
    with pytest.raises(StorageError, match="no valid.txt or valid.tsv"):
        build_dataset("tsv:transductive", tmp_path / "ds", raw_path=tmp_path / "raw")


def _unseen_layout(raw):
    write_tsv(raw / "train.txt", [("a", "r", "b"), ("b", "r", "c")])
    write_tsv(raw / "valid.txt", [("a", "r", "c"), ("a", "r", "zz"), ("yy", "r", "b")])
    write_tsv(raw / "test.txt", [("b", "r", "a"), ("", "", "")][:1] + [("q", "r", "a")])


def test_unseen_entity_transductive(tmp_path):
    raw = tmp_path / "raw"
    _unseen_layout(raw)
    with pytest.raises(StorageError) as err:
        build_dataset("tsv:transductive", tmp_path / "ds", raw_path=raw)
    msg = str(err.value)
    assert str(raw / "valid.txt") in msg and "line 2" in msg and "'zz'" in msg
    assert "2 facts with unseen entities" in msg and "drop-unseen-entities" in msg
    ds = open_dataset(
        build_dataset("tsv:transductive", tmp_path / "d1", raw_path=raw, drop_unseen_entities=True)
    )
    assert ds.source["stats"]["unseen_entity_facts_dropped"] == {"train": 0, "valid": 2, "test": 1}
    assert ds.graph_data().facts("valid").tolist() == [[0, 0, 2]]
    assert ds.graph_data().num_nodes == 3
    ds = open_dataset(
        build_dataset("tsv:transductive", tmp_path / "d2", raw_path=raw, keep_unseen_entities=True)
    )
    g = ds.graph_data()
    assert g.entity_names == ["a", "b", "c", "q", "yy", "zz"]
    assert len(g.facts("valid")) == 3 and g.graph().num_edges == 4
    assert int(g.graph().in_degree()[5]) == 0  # unseen entity: isolated node


def test_unseen_relation_is_an_error(tmp_path):
    raw = tmp_path / "raw"
    write_tsv(raw / "train.txt", [("a", "r", "b"), ("b", "r", "c")])
    write_tsv(raw / "valid.txt", [("a", "r", "c")])
    write_tsv(raw / "test.txt", [("a", "r", "c"), ("b", "new_rel", "a")])
    with pytest.raises(StorageError, match=r"test\.txt: line 2: relation 'new_rel' never occurs"):
        build_dataset("tsv:transductive", tmp_path / "ds", raw_path=raw, drop_unseen_entities=True)


def _grail(root, ind_rel="r"):
    write_tsv(root / "X_v1" / "train.txt", [("a", "r", "b"), ("b", "s", "c"), ("c", "r", "a")])
    write_tsv(root / "X_v1" / "valid.txt", [("a", "s", "c")])
    write_tsv(root / "X_v1" / "test.txt", [("b", "r", "a")])
    write_tsv(root / "X_v1_ind" / "train.txt", [("u", "s", "v"), ("v", ind_rel, "w")])
    write_tsv(root / "X_v1_ind" / "valid.txt", [("w", "s", "u")])
    write_tsv(root / "X_v1_ind" / "test.txt", [("u", "r", "w"), ("w", "r", "v")])


def test_inductive_layout(tmp_path):
    _grail(tmp_path)
    ds = open_dataset(
        build_dataset("tsv:inductive", tmp_path / "ds", raw_path=tmp_path / "X_v1", num_shards=2),
        verify=True,
    )
    assert ds.inductive and ds.graph_names == ["train", "test"] and ds.name == "X_v1"
    assert ds.relation_names == ["r", "s"]
    tr, te = ds.graph_data("train"), ds.graph_data("test")
    assert tr.entity_names == ["a", "b", "c"] and te.entity_names == ["u", "v", "w"]
    assert te.facts("train").tolist() == [[0, 1, 1], [1, 0, 2]]
    assert te.facts("test").tolist() == [[0, 0, 2], [2, 0, 1]]
    assert te.graph().num_edges == 4 and tr.graph().num_edges == 6


def test_inductive_unseen_relation(tmp_path):
    _grail(tmp_path, ind_rel="only_in_test_graph")
    with pytest.raises(StorageError) as err:
        build_dataset("tsv:inductive", tmp_path / "ds", raw_path=tmp_path / "X_v1")
    msg = str(err.value)
    assert "X_v1_ind/train.txt: line 2" in msg and "'only_in_test_graph'" in msg
    (tmp_path / "Y_v1").mkdir()
    with pytest.raises(StorageError, match="needs the test graph folder Y_v1_ind"):
        build_dataset("tsv:inductive", tmp_path / "ds", raw_path=tmp_path / "Y_v1")
    with pytest.raises(StorageError, match="no such folder"):
        build_dataset("tsv:inductive", tmp_path / "ds", raw_path=tmp_path / "nothing_v1")


def test_node_types_prefix_and_file(tmp_path):
    raw = tmp_path / "raw"
    write_tsv(raw / "train.txt", [("Gene::1", "GiG", "Gene::2"), ("Drug::x", "DbG", "Gene::1")])
    write_tsv(raw / "valid.txt", [("Drug::x", "DbG", "Gene::2")])
    write_tsv(raw / "test.txt", [("Gene::2", "GiG", "Gene::1")])
    g = open_dataset(
        build_dataset("tsv:transductive", tmp_path / "a", raw_path=raw, node_types="prefix")
    ).graph_data()
    assert g.entity_names == ["Drug::x", "Gene::1", "Gene::2"]
    assert g.node_type_names == ["Drug", "Gene"] and g.node_types.tolist() == [0, 1, 1]
    types = write_tsv(
        tmp_path / "types.tsv",
        [("Gene::1", "protein"), ("Gene::2", "protein"), ("Drug::x", "chem")],
    )
    g = open_dataset(
        build_dataset("tsv:transductive", tmp_path / "b", raw_path=raw, node_types=types)
    ).graph_data()
    assert g.node_type_names == ["chem", "protein"] and g.node_types.tolist() == [0, 1, 1]
    write_tsv(types, [("Gene::1", "protein")])
    with pytest.raises(StorageError, match=r"types\.tsv.*'Drug::x' has no line"):
        build_dataset("tsv:transductive", tmp_path / "c", raw_path=raw, node_types=types)
    write_tsv(raw / "train.txt", [("Gene::1", "GiG", "noprefix")])
    write_tsv(raw / "valid.txt", [("Gene::1", "GiG", "noprefix")])
    write_tsv(raw / "test.txt", [("Gene::1", "GiG", "noprefix")])
    with pytest.raises(StorageError, match="'noprefix' has no 'Kind::' prefix"):
        build_dataset("tsv:transductive", tmp_path / "d", raw_path=raw, node_types="prefix")


def test_grail_fb237_v1_counts(shared_data, tmp_path):
    raw = shared_data / "inductive" / "fb237_v1"
    ds = open_dataset(build_dataset("tsv:inductive", tmp_path / "fb", raw_path=raw), verify=True)
    tr, te = ds.graph_data("train"), ds.graph_data("test")
    assert [len(tr.facts(s)) for s in ("train", "valid", "test")] == [4245, 489, 492]
    assert [len(te.facts(s)) for s in ("train", "valid", "test")] == [1993, 206, 205]
    assert tr.graph().num_edges == 2 * 4245 and te.graph().num_edges == 2 * 1993
    assert not set(tr.entity_names) & set(te.entity_names)
    # spot check against the file: the first training line maps back to its strings
    h, r, t = (raw / "train.txt").read_text().splitlines()[0].split("\t")
    f = tr.facts("train")[0].tolist()
    assert (tr.entity_names[f[0]], ds.relation_names[f[1]], tr.entity_names[f[2]]) == (h, r, t)


@pytest.mark.integration
def test_convert_cli(tmp_path):
    _grail(tmp_path)
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "cmpnn_dist.convert",
            "tsv:inductive",
            str(tmp_path / "ds"),
            "--raw",
            str(tmp_path / "X_v1"),
            "--shards",
            "2",
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["graphs"]["test"]["facts"]["test"] == 2
    write_tsv(tmp_path / "X_v1" / "valid.txt", ["a\ts"])
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "cmpnn_dist.convert",
            "tsv:inductive",
            str(tmp_path / "ds2"),
            "--raw",
            str(tmp_path / "X_v1"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "valid.txt: line 1: expected 3 tab-separated fields, got 2" in bad.stderr
    assert not (tmp_path / "ds2").exists()
