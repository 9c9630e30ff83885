"""``convert hetionet`` against a split PyKEEN itself produced (the oracle is not our code).

``tests/fixtures/hetionet_pykeen/`` holds a generated graph in hetio's upstream layout and the
split that ``pykeen.datasets.Hetionet`` (random_state 0, 0.8 / 0.1 / 0.1: the paper's split)
made of it, written once by ``make_golden.py`` in a throw-away environment with PyKEEN
(versions in ``versions.json``).  CI has no PyKEEN: it compares our converter's output with
those files, label for label and in order, on every run.
"""

from __future__ import annotations

import json
import shutil

import pytest

from cmpnn_dist.convert import build_dataset
from cmpnn_dist.storage import open_dataset
from tests.helpers.paths import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "fixtures" / "hetionet_pykeen"
INPUTS = ("hetionet-v1.0-edges.sif.gz", "hetionet-v1.0-nodes.tsv")


def _rows(name: str) -> list[tuple[str, ...]]:
    with open(GOLDEN / name) as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    raw = tmp_path_factory.mktemp("raw")
    for name in INPUTS:
        shutil.copy(GOLDEN / name, raw / name)
    out = tmp_path_factory.mktemp("ds") / "hetionet"
    return open_dataset(build_dataset("hetionet", out, raw_path=raw), verify=True)


def test_golden_files_come_from_pykeen():
    versions = json.loads((GOLDEN / "versions.json").read_text())
    assert versions["pykeen"] and versions["torch"]
    assert "Hetionet" in versions["dataset"] and "random_state 0" in versions["dataset"]
    sizes = {s: len(_rows(f"pykeen_{s}.tsv")) for s in ("train", "valid", "test")}
    assert sizes == versions["sizes"]
    assert sizes["train"] > 2000 and sizes["valid"] > 200 and sizes["test"] > 200


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_split_equals_pykeens_label_for_label(converted, split):
    g = converted.graph_data()
    names, relations = g.entity_names, converted.relation_names
    ours = [(names[h], relations[r], names[t]) for h, r, t in g.facts(split).tolist()]
    assert ours == _rows(f"pykeen_{split}.tsv")


def test_entity_and_relation_ids_equal_pykeens(converted):
    entities = [name for name, _ in _rows("pykeen_entity_to_id.tsv")]
    relations = [name for name, _ in _rows("pykeen_relation_to_id.tsv")]
    assert [int(i) for _, i in _rows("pykeen_entity_to_id.tsv")] == list(range(len(entities)))
    assert converted.graph_data().entity_names == entities
    assert converted.relation_names == relations
