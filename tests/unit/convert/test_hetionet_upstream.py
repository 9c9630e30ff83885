"""Hetionet from hetio's upstream files: PyKEEN's coverage split, the converter on fixtures in
the exact upstream layout (written here: gzip SIF + nodes TSV), its error lines, and the
``synthetic:hetionet_schema`` graph."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.convert.coverage_split import (
    canonical_triples,
    coverage_mask,
    coverage_split,
    relation_order,
    split_sizes,
)
from cmpnn_dist.convert.hetionet import convert_hetionet
from cmpnn_dist.convert.synthetic import hetionet_schema as hs
from cmpnn_dist.storage import StorageError, open_dataset

EDGES = "hetionet-v1.0-edges.sif.gz"
NODES = "hetionet-v1.0-nodes.tsv"

NODE_ROWS = [
    ("Compound::DB00001", "Lepirudin", "Compound"),
    ("Compound::DB00002", "Cetuximab", "Compound"),
    ("Compound::DB00003", "Dornase alfa", "Compound"),  # no edge
    ("Disease::DOID:9", "disease nine", "Disease"),
    ("Disease::DOID:1234", "disease", "Disease"),
    ("Gene::100", "ADA", "Gene"),
    ("Gene::200", "ADA", "Gene"),  # names repeat upstream too
    ("Gene::300", "CDH2", "Gene"),
    ("Symptom::D000001", "Calcimycin", "Symptom"),  # no edge
]
EDGE_ROWS = [
    ("Compound::DB00001", "CtD", "Disease::DOID:1234"),
    ("Compound::DB00002", "CtD", "Disease::DOID:1234"),
    ("Gene::100", "GiG", "Gene::200"),
    ("Gene::200", "Gr>G", "Gene::300"),
    ("Gene::300", "Gr>G", "Gene::100"),
    ("Compound::DB00001", "CbG", "Gene::100"),
    ("Compound::DB00002", "CbG", "Gene::200"),
    ("Compound::DB00002", "CbG", "Gene::300"),
    ("Compound::DB00001", "CbG", "Gene::300"),
    ("Disease::DOID:9", "DaG", "Gene::200"),
    ("Disease::DOID:9", "DaG", "Gene::100"),
    ("Disease::DOID:1234", "DaG", "Gene::300"),
    ("Compound::DB00001", "CpD", "Disease::DOID:9"),
    ("Gene::100", "GiG", "Gene::300"),
    ("Compound::DB00002", "CtD", "Disease::DOID:9"),
    ("Gene::100", "GiG", "Gene::200"),  # a repeated edge: PyKEEN keeps it once
]


def write_upstream(folder: Path, edges=EDGE_ROWS, nodes=NODE_ROWS, edge_lines=None) -> Path:
    """hetio's layout: gzip SIF with header, nodes TSV with header."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = edge_lines if edge_lines is not None else ["\t".join(e) for e in edges]
    with gzip.open(folder / EDGES, "wt") as f:
        f.write("source\tmetaedge\ttarget\n" + "".join(x + "\n" for x in lines))
    (folder / NODES).write_text("id\tname\tkind\n" + "".join("\t".join(n) + "\n" for n in nodes))
    return folder


def labelled(ds, split: str) -> list[tuple[str, str, str]]:
    g = ds.graph_data()
    names = g.entity_names
    return [(names[h], ds.relation_names[r], names[t]) for h, r, t in g.facts(split).tolist()]


# ---------------------------------------------------------------- the split itself


def test_split_sizes_give_the_papers_hetionet_counts():
    assert split_sizes(2_250_197, (0.8, 0.1, 0.1)) == (1_800_157, 225_020, 225_020)
    assert split_sizes(10, 0.8) == (8, 2)  # remainder appended
    assert split_sizes(7, (0.5, 0.25)) == (3, 2, 2)  # floor of cumulative cut points
    with pytest.raises(StorageError, match="sum to"):
        split_sizes(10, (0.8, 0.3))


def test_relation_order_puts_inverse_after_its_relation():
    assert relation_order(["b", "a_inverse", "a", "Gr>G", "GiG"]) == [
        "GiG",
        "Gr>G",
        "a",
        "a_inverse",
        "b",
    ]


def slow_cover(triples: np.ndarray) -> set[int]:
    """The greedy cover spelled out with dicts: lowest index per relation, then per
    uncovered head, then per uncovered tail."""
    chosen: set[int] = set()
    first_rel: dict[int, int] = {}
    for i, (_, r, _) in enumerate(triples.tolist()):
        first_rel.setdefault(r, i)
    chosen |= set(first_rel.values())
    for col in (0, 2):
        covered = {x for i in chosen for x in (triples[i, 0], triples[i, 2])}
        first: dict[int, int] = {}
        for i, row in enumerate(triples.tolist()):
            if row[col] not in covered:
                first.setdefault(row[col], i)
        chosen |= set(first.values())
    return chosen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coverage_split_against_a_slow_reference(seed):
    rng = np.random.default_rng(seed)
    n, r = 60, 5
    raw = np.stack([rng.integers(0, n, 400), rng.integers(0, r, 400), rng.integers(0, n, 400)], 1)
    canon = canonical_triples(raw, n, r)
    assert list(map(tuple, canon.tolist())) == sorted(
        set(map(tuple, raw.tolist()))
    )  # sorted, distinct
    mask = coverage_mask(canon, n)
    assert set(np.flatnonzero(mask).tolist()) == slow_cover(canon)
    parts = coverage_split(canon, n, (0.8, 0.1, 0.1), random_state=seed)
    assert [len(p) for p in parts] == list(split_sizes(len(canon), (0.8, 0.1, 0.1)))
    # a partition of the triples; the seed first, in index order; the rest by randperm
    assert sorted(map(tuple, np.concatenate(parts).tolist())) == list(map(tuple, canon.tolist()))
    k = int(mask.sum())
    np.testing.assert_array_equal(parts[0][:k], canon[mask])
    rest = canon[~mask]
    import torch

    perm = torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed)).numpy()
    np.testing.assert_array_equal(np.concatenate([parts[0][k:], parts[1], parts[2]]), rest[perm])
    used = np.unique(canon[:, [0, 2]])
    assert set(np.unique(parts[0][:, [0, 2]]).tolist()) == set(used.tolist())
    assert set(parts[0][:, 1].tolist()) == set(canon[:, 1].tolist())


def test_coverage_split_too_small_first_part_is_an_error():
    triples = canonical_triples(np.array([[i, 0, i + 1] for i in range(0, 20, 2)]), 21, 1)
    with pytest.raises(StorageError, match="cover needs 10 triples"):
        coverage_split(triples, 21, (0.5, 0.5))


def test_split_equals_pykeen(tmp_path):
    """Our converter against PyKEEN itself (optional: skips without pykeen), on a generated
    graph in hetio's layout read the way PyKEEN's ``SingleTabbedDataset`` reads it."""
    pd = pytest.importorskip("pandas")
    tf_mod = pytest.importorskip("pykeen.triples", reason="pykeen is not installed")
    rng = np.random.default_rng(7)
    kinds = {"Gene": 300, "Compound": 40, "Disease": 25}
    nodes = [(f"{k}::{i}", f"{k} {i}", k) for k, c in kinds.items() for i in range(c)]
    ids = [n[0] for n in nodes]
    rels = ["GiG", "CtD", "Gr>G", "CbG", "DaG", "x_inverse_not"]
    edges = [
        (ids[a], rels[b], ids[c])
        for a, b, c in zip(
            rng.integers(0, len(ids), 3000),
            rng.integers(0, len(rels), 3000),
            rng.integers(0, len(ids), 3000),
            strict=True,
        )
    ]
    folder = write_upstream(tmp_path / "het", edges=edges, nodes=nodes)
    ds = open_dataset(build_dataset("hetionet", tmp_path / "ds", raw_path=folder))
    df = pd.read_csv(folder / EDGES, sep="\t")  # as pykeen.datasets.base.SingleTabbedDataset
    tf = tf_mod.TriplesFactory.from_labeled_triples(triples=df.values)
    training, testing, validation = tf.split(ratios=(0.8, 0.1, 0.1), random_state=0)
    for part, split in ((training, "train"), (testing, "test"), (validation, "valid")):
        theirs = [tuple(x) for x in part.label_triples(part.mapped_triples).tolist()]
        assert labelled(ds, split) == theirs, split
    g = ds.graph_data()
    assert g.entity_names == sorted(tf.entity_to_id, key=tf.entity_to_id.get)
    assert ds.relation_names == sorted(tf.relation_to_id, key=tf.relation_to_id.get)


# ---------------------------------------------------------------- the converter


def test_upstream_fixture(tmp_path):
    folder = write_upstream(tmp_path / "het")
    ds = open_dataset(build_dataset("hetionet", tmp_path / "ds", raw_path=folder), verify=True)
    g = ds.graph_data()
    connected = sorted({x for h, _, t in EDGE_ROWS for x in (h, t)})
    assert g.entity_names == connected  # PyKEEN's entities: sorted ids of nodes with an edge
    assert g.node_type_names == ["Compound", "Disease", "Gene", "Symptom"]  # the kind column
    kind = {n[0]: n[2] for n in NODE_ROWS}
    assert [g.node_type_names[k] for k in g.node_types.tolist()] == [kind[x] for x in connected]
    assert ds.relation_names == ["CbG", "CpD", "CtD", "DaG", "GiG", "Gr>G"]
    splits = {s: labelled(ds, s) for s in ("train", "valid", "test")}
    distinct = sorted(set(EDGE_ROWS))
    assert sorted(sum(splits.values(), [])) == distinct
    assert [len(splits[s]) for s in ("train", "test", "valid")] == list(
        split_sizes(15, (0.8, 0.1, 0.1))
    )
    assert {x for h, _, t in splits["train"] for x in (h, t)} == set(connected)
    assert {r for _, r, _ in splits["train"]} == set(ds.relation_names)
    src = ds.source
    assert src["format"] == "hetionet-upstream" and src["split"]["random_state"] == 0
    assert src["stats"]["duplicates_dropped"] == 1
    assert src["edges_match_hetionet_v1.0"] is False
    # unconnected nodes of the node table appended as isolated nodes, after PyKEEN's ids
    ds2 = open_dataset(
        build_dataset("hetionet", tmp_path / "ds2", raw_path=folder, keep_unseen_entities=True)
    )
    g2 = ds2.graph_data()
    assert g2.entity_names == connected + ["Compound::DB00003", "Symptom::D000001"]
    assert g2.node_types.tolist()[-2:] == [0, 3]
    for s in ("train", "valid", "test"):
        assert labelled(ds2, s) == splits[s]


def test_upstream_plain_sif_and_seed(tmp_path):
    folder = write_upstream(tmp_path / "het")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "hetionet-v1.0-edges.sif").write_bytes(gzip.decompress((folder / EDGES).read_bytes()))
    (plain / NODES).write_bytes((folder / NODES).read_bytes())
    a, b = convert_hetionet(folder), convert_hetionet(plain)
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(a["graphs"]["train"].facts[s], b["graphs"]["train"].facts[s])
    c = convert_hetionet(folder, random_state=1)
    assert any(
        not np.array_equal(a["graphs"]["train"].facts[s], c["graphs"]["train"].facts[s])
        for s in ("valid", "test")
    )


BAD_EDGE_CASES = [
    (["Gene::100\tGiG\tGene::200", "Gene::100\tGiG"], r"edges\.sif\.gz: line 3: expected 3 tab"),
    (
        ["Gene::100\tGiG\tGene::200", "Gene::200\t\tGene::100"],
        r"edges\.sif\.gz: line 3: empty field 2",
    ),
    (
        ["Gene::100\tGiG\tGene::200", "Gene::100\tGiG\tGene::999"],
        r"edges\.sif\.gz: line 3: target 'Gene::999' is not in hetionet-v1\.0-nodes\.tsv",
    ),
    (["a\tb\tc\td"], r"edges\.sif\.gz: line 2: expected 3 tab"),
]


@pytest.mark.parametrize(("lines", "match"), BAD_EDGE_CASES)
def test_bad_edge_line_names_file_and_line(tmp_path, lines, match):
    folder = write_upstream(tmp_path / "het", edge_lines=lines)
    with pytest.raises(StorageError, match=match):
        build_dataset("hetionet", tmp_path / "ds", raw_path=folder)
    assert not (tmp_path / "ds").exists()


def test_bad_headers_and_node_lines(tmp_path):
    folder = write_upstream(tmp_path / "het")
    with gzip.open(folder / EDGES, "wt") as f:
        f.write("from\tedge\tto\nGene::100\tGiG\tGene::200\n")
    with pytest.raises(StorageError, match=r"edges\.sif\.gz: line 1: expected the header"):
        convert_hetionet(folder)
    folder = write_upstream(tmp_path / "het2", nodes=NODE_ROWS + [("Gene::100", "again", "Gene")])
    with pytest.raises(
        StorageError, match=r"nodes\.tsv: line 11: node id 'Gene::100' repeats line 7"
    ):
        convert_hetionet(folder)
    folder = write_upstream(tmp_path / "het3")
    (folder / NODES).write_text((folder / NODES).read_text() + "Gene::5\tname\n")
    with pytest.raises(StorageError, match=r"nodes\.tsv: line 11: expected 3 tab"):
        convert_hetionet(folder)
    (folder / NODES).unlink()
    with pytest.raises(StorageError, match=r"nodes\.tsv: file not found"):
        convert_hetionet(folder)


def test_missing_edges_file_says_what_to_fetch(tmp_path):
    (tmp_path / "het").mkdir()
    (tmp_path / "het" / f"{EDGES}.LFS-POINTER.txt").write_text("version https://git-lfs...\n")
    with pytest.raises(StorageError, match=r"no hetionet-v1\.0-edges\.sif\.gz .*Git LFS pointer"):
        build_dataset("hetionet", tmp_path / "ds", raw_path=tmp_path / "het")


def test_garbage_gzip_is_one_error(tmp_path):
    folder = write_upstream(tmp_path / "het")
    (folder / EDGES).write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(StorageError, match=r"edges\.sif\.gz"):
        convert_hetionet(folder)


# ---------------------------------------------------------------- synthetic:hetionet_schema


def test_schema_constants_match_hetios_tables(shared_data):
    import csv

    with open(shared_data / "hetionet" / "metaedges.tsv") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    got = [
        (r["abbreviation"], int(r["edges"]), int(r["source_nodes"]), int(r["target_nodes"]))
        for r in rows
    ]
    assert got == [(m[0], m[3], m[4], m[5]) for m in hs.METAEDGES]
    assert [r["metaedge"].split(" ")[0] for r in rows] == [m[1].split(" ")[0] for m in hs.METAEDGES]
    assert sum(m[3] for m in hs.METAEDGES) == 2_250_197
    with open(shared_data / "hetionet" / "metanodes.tsv") as f:
        sizes = {r["metanode"]: int(r["nodes"]) for r in csv.DictReader(f, delimiter="\t")}
    assert sizes == hs.KIND_SIZES and sum(sizes.values()) == 47_031


def check_schema(g: dict, scale: float) -> None:
    nodes, tri = g["nodes"], g["triples"]
    kind = np.asarray(nodes.column("kind").to_pylist(), dtype=object)
    assert nodes.column("id").to_pylist() == sorted(nodes.column("id").to_pylist())
    assert len({tuple(x) for x in tri.tolist()}) == len(tri)  # no repeated edge
    assert not (tri[:, 0] == tri[:, 2]).any()
    for abbr, sk, tk, edges, s_n, t_n in hs.METAEDGES:
        f = tri[tri[:, 1] == g["relation_names"].index(abbr)]
        assert set(kind[f[:, 0]]) == {sk} and set(kind[f[:, 2]]) == {tk}, abbr
        assert len(f) <= max(1, round(edges * scale))
        if scale == 1:
            assert len(f) == edges
            assert len(np.unique(f[:, 0])) == s_n and len(np.unique(f[:, 2])) == t_n, abbr


def test_schema_small_generated_nodes():
    g = hs.generate({"scale": 0.001})
    check_schema(g, 0.001)
    assert len(g["triples"]) > 0.95 * 2250
    assert g["relation_names"] == relation_order([m[0] for m in hs.METAEDGES])
    # degree skew (scale 0.01: 22,502 edges): the busiest gene has > 8x the mean gene degree
    g10 = hs.generate({"scale": 0.01})
    check_schema(g10, 0.01)
    kind = np.asarray(g10["nodes"].column("kind").to_pylist())
    genes = np.flatnonzero(kind == "Gene")
    deg = np.bincount(g10["triples"][:, [0, 2]].ravel(), minlength=len(kind))[genes]
    assert deg.max() > 8 * deg[deg > 0].mean()
    # deterministic per seed
    np.testing.assert_array_equal(hs.generate({"scale": 0.001})["triples"], g["triples"])
    assert not np.array_equal(hs.generate({"scale": 0.001, "seed": 1})["triples"], g["triples"])


def test_schema_dataset_equals_converting_its_upstream_files(tmp_path, shared_data):
    """The generator's dataset and ``convert hetionet`` of the same graph written in hetio's
    layout (real node ids, names and kinds) are the same dataset."""
    raw = shared_data / "hetionet"
    params = {"scale": 0.002}
    direct = open_dataset(
        build_dataset("synthetic:hetionet_schema", tmp_path / "a", raw_path=raw, synthetic=params),
        verify=True,
    )
    counts = hs.write_upstream(tmp_path / "up", params, raw)
    lines = gzip.decompress((tmp_path / "up" / EDGES).read_bytes()).decode().splitlines()
    assert lines[0] == "source\tmetaedge\ttarget" and len(lines) == counts["edges"] + 1
    real = {ln.split("\t")[0] for ln in (raw / NODES).read_text().splitlines()[1:]}
    assert {ln.split("\t")[0] for ln in lines[1:]} <= real  # real node ids
    conv = open_dataset(build_dataset("hetionet", tmp_path / "b", raw_path=tmp_path / "up"))
    a, b = direct.graph_data(), conv.graph_data()
    assert direct.name == "hetionet_schema" and a.entity_names == b.entity_names
    assert set(a.entity_names) <= real
    assert a.node_type_names == b.node_type_names == sorted(hs.KIND_SIZES)
    assert a.node_types.tolist() == b.node_types.tolist()
    assert direct.relation_names == conv.relation_names
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(a.facts(s).numpy(), b.facts(s).numpy())


def test_schema_bad_params(tmp_path):
    with pytest.raises(StorageError, match="unknown synthetic parameter 'edges'"):
        hs.generate({"edges": 3})
    with pytest.raises(StorageError, match=r"scale must be in \(0, 1\]"):
        hs.generate({"scale": 2})
    with pytest.raises(StorageError, match="file not found"):
        hs.generate({"scale": 0.001}, tmp_path)


@pytest.mark.slow
def test_schema_full_scale_has_the_papers_split(shared_data):
    out = hs.build_hetionet_schema(None, shared_data / "hetionet")
    facts = out["graphs"]["train"].facts
    assert [len(facts[s]) for s in ("train", "valid", "test")] == [1_800_157, 225_020, 225_020]
    check_schema(hs.generate(None, shared_data / "hetionet"), 1.0)
