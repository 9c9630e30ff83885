"""ogbl-biokg (through OGB's own loader, on a fixture in OGB's on-disk layout) and Hetionet."""

from __future__ import annotations

import numpy as np
import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.storage import StorageError, open_dataset
from tests.helpers.fixtures_storage import OGB_TYPES, write_hetionet, write_ogb_biokg


def test_ogb_biokg_fixture(tmp_path):
    root = tmp_path / "ogb"
    expected = write_ogb_biokg(root)
    for attempt in range(2):  # 1st: OGB processes raw/; 2nd: it loads processed/data_processed
        ds = open_dataset(
            build_dataset("ogb:biokg", tmp_path / f"ds{attempt}", raw_path=root, num_shards=2),
            verify=True,
        )
        assert (root / "ogbl_biokg" / "processed" / "data_processed").is_file()
        g = ds.graph_data()
        assert ds.name == "ogbl-biokg" and not ds.inductive
        assert g.num_nodes == expected["num_nodes"] == sum(OGB_TYPES.values())
        assert g.node_type_names == ["disease", "drug", "protein"]
        sizes = [OGB_TYPES[t] for t in g.node_type_names]
        assert g.node_types.tolist() == sum(([k] * s for k, s in enumerate(sizes)), [])
        assert ds.relation_names == ["drug-disease", "drug-protein", "protein-protein"]
        for split in ("train", "valid", "test"):
            np.testing.assert_array_equal(g.facts(split).numpy(), expected[split])
        # every fact's endpoints have the types its relation says
        f = g.facts("train").numpy()
        types = g.node_types.numpy()
        heads = {0: "drug", 1: "drug", 2: "protein"}
        assert all(g.node_type_names[types[h]] == heads[r] for h, r, _ in f)
        for split in ("valid", "test"):
            neg = ds.negatives(split)
            for key in ("head_neg", "tail_neg"):
                np.testing.assert_array_equal(neg[key].numpy(), expected[f"{split}_neg"][key])
            assert neg["tail_neg"].shape == (len(expected[split]), 7)
        assert ds.negatives("train") is None
        assert g.entity_names[0] == "disease::0"


def test_ogb_missing_files_clear_error(tmp_path, monkeypatch):
    import ogb.utils.url as ogb_url

    def no_network(*a, **k):
        raise AssertionError("OGB tried to download")

    monkeypatch.setattr(ogb_url, "download_url", no_network)
    monkeypatch.setattr(ogb_url, "decide_download", no_network)
    with pytest.raises(StorageError) as err:
        build_dataset("ogb:biokg", tmp_path / "ds", raw_path=tmp_path / "empty_root")
    msg = str(err.value)
    assert "ogbl-biokg files not found" in msg and "biokg.zip" in msg
    assert str(tmp_path / "empty_root" / "ogbl_biokg") in msg
    # a partial copy: the split is missing
    write_ogb_biokg(tmp_path / "partial")
    (tmp_path / "partial" / "ogbl_biokg" / "split" / "random" / "test.pt").unlink()
    with pytest.raises(StorageError, match=r"missing .*split/random/test\.pt"):
        build_dataset("ogb:biokg", tmp_path / "ds", raw_path=tmp_path / "partial")
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("header", [True, False])
def test_hetionet_fixture(tmp_path, header):
    rows = write_hetionet(tmp_path / "het", header=header)
    ds = open_dataset(
        build_dataset("hetionet", tmp_path / "ds", raw_path=tmp_path / "het"), verify=True
    )
    g = ds.graph_data()
    names = sorted({x for h, _, t in rows["train"] for x in (h, t)})
    assert g.entity_names == names
    assert g.node_type_names == ["Compound", "Disease", "Gene"]
    assert [g.node_type_names[k] for k in g.node_types.tolist()] == [
        n.split("::")[0] for n in names
    ]
    assert ds.relation_names == ["CbG", "CtD", "DaG", "GiG"]
    decoded = [
        (g.entity_names[h], ds.relation_names[r], g.entity_names[t])
        for h, r, t in g.facts("test").tolist()
    ]
    assert decoded == rows["test"]
    assert g.graph().num_edges == 2 * len(rows["train"])


def test_hetionet_bad_line_number_counts_header(tmp_path):
    write_hetionet(tmp_path / "het", header=True)
    p = tmp_path / "het" / "valid.tsv"
    p.write_text(p.read_text() + "Gene::1\tGiG\n")
    with pytest.raises(StorageError, match=r"valid\.tsv: line 3: expected 3 tab-separated"):
        build_dataset("hetionet", tmp_path / "ds", raw_path=tmp_path / "het")
    write_hetionet(tmp_path / "het", header=True)
    p.write_text(p.read_text() + "Gene::999\tGiG\tGene::100\n")
    with pytest.raises(StorageError, match=r"valid\.tsv: line 3: entity 'Gene::999'"):
        build_dataset("hetionet", tmp_path / "ds", raw_path=tmp_path / "het")
