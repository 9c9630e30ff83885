"""The dataset-source registry (``cmpnn_dist/convert/sources/``): every built-in ``data.source``
is registered from its own module, a registered name is a schema choice (validate, ``--help``,
the convert CLI), an unknown one is refused before anything is built, and each source's
``files`` are what its record hashes.  Real files and real builds throughout."""

from __future__ import annotations

import json
import re

import pytest

from cmpnn_dist.cli.common import help_text
from cmpnn_dist.config import Config, ConfigError, DataSource, choices, validate
from cmpnn_dist.config import registry as config_registry
from cmpnn_dist.convert import build_dataset, sources
from cmpnn_dist.convert.prepare import ensure_dataset, spec_for
from cmpnn_dist.convert.provenance import source_files
from cmpnn_dist.convert.sources import base as source_base
from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import open_dataset

# the built-ins and their modules (transcribed from the package docstring's table)
BUILT_IN = {
    "tsv:transductive": "tsv_transductive",
    "tsv:inductive": "tsv_inductive",
    "ogb:biokg": "ogb_biokg",
    "hetionet": "hetionet",
    "synthetic:rule_kg": "rule_kg",
    "synthetic:rule_kg_inductive": "rule_kg_inductive",
    "synthetic:trisqr": "trisqr",
    "synthetic:biokg_scale": "biokg_scale",
    "synthetic:biokg_rules": "biokg_rules",
    "synthetic:hetionet_schema": "hetionet_schema",
}


@pytest.fixture
def isolated(monkeypatch):
    """The source registry and the schema's registered choices as they were before the test."""
    monkeypatch.setattr(source_base, "_REGISTRY", dict(source_base._REGISTRY))
    registered = {k: list(v) for k, v in config_registry._REGISTERED_CHOICES.items()}
    monkeypatch.setattr(config_registry, "_REGISTERED_CHOICES", registered)


def test_every_built_in_source_is_registered_from_its_own_module():
    assert sorted(choices(DataSource)) == sorted(BUILT_IN)
    assert sources.names() == sorted(BUILT_IN)  # nothing else registered in the package
    for name, module in BUILT_IN.items():
        assert sources.get(name).convert.__module__ == f"cmpnn_dist.convert.sources.{module}"
        assert sources.get(name).name == name
    generators = {n for n in BUILT_IN if sources.get(n).generator}
    assert generators == {n for n in BUILT_IN if n.startswith("synthetic:")}


def test_a_registered_source_is_a_schema_choice_listed_by_help(isolated, tmp_path):
    cfg = Config()
    cfg.data.source = "edges:mine"
    with pytest.raises(ConfigError, match=r"bad value 'edges:mine' for data\.source"):
        validate(cfg)
    assert "edges:mine" not in help_text("")
    sources.register_source("edges:mine", lambda spec: {}, generator=True)
    validate(cfg)
    line = next(ln for ln in help_text("").splitlines() if "data.source=" in ln)
    assert line.split("(", 1)[1].rstrip(")").split(" | ") == [*choices(DataSource), "edges:mine"]


def test_an_unknown_source_is_refused_before_anything_is_built(tmp_path):
    cfg = Config(storage_root=str(tmp_path / "storage"))
    cfg.data.source = "tsv:transductivx"  # not validated: ensure_dataset checks it itself
    with pytest.raises(UsageError) as err:
        ensure_dataset(cfg)
    assert str(err.value) == (
        f"data.source='tsv:transductivx' is unknown; known: {', '.join(sorted(BUILT_IN))}"
    )
    assert not (tmp_path / "storage").exists()


def test_generators_drop_a_raw_path_and_file_sources_need_one(tmp_path):
    spec = spec_for(Config())
    assert (spec.source, spec.raw_path, spec.synthetic) == ("synthetic:rule_kg", None, {})
    cfg = Config()
    cfg.data.source, cfg.data.raw_path = "synthetic:trisqr", str(tmp_path)
    cfg.data.synthetic = {"num_pairs": 3}
    assert spec_for(cfg).raw_path is None and spec_for(cfg).synthetic == {"num_pairs": 3}
    cfg.data.source = "tsv:transductive"  # a file source keeps its folder, drops parameters
    assert spec_for(cfg).raw_path == str(tmp_path.resolve()) and spec_for(cfg).synthetic == {}
    with pytest.raises(Exception, match="source ogb:biokg needs raw_path"):
        build_dataset("ogb:biokg", tmp_path / "ds")


def test_each_sources_files_are_what_it_reads(tmp_path):
    ind = tmp_path / "g_v1"
    for folder in (ind, tmp_path / "g_v1_ind"):
        folder.mkdir()
        for split in ("train", "valid", "test"):
            (folder / f"{split}.txt").write_text("a\tr\tb\n")
    (ind / "notes.md").write_text("not a split")
    cfg = Config()
    cfg.data.source, cfg.data.raw_path = "tsv:inductive", str(ind)
    assert sorted(source_files(spec_for(cfg))) == [
        "../g_v1_ind/test.txt", "../g_v1_ind/train.txt", "../g_v1_ind/valid.txt",
        "test.txt", "train.txt", "valid.txt",
    ]  # fmt: skip
    cfg.data.source = "tsv:transductive"
    assert sorted(source_files(spec_for(cfg))) == ["test.txt", "train.txt", "valid.txt"]
    cfg.data.source = "hetionet"  # every visible file of the folder
    assert sorted(source_files(spec_for(cfg))) == sorted(
        ["notes.md", "test.txt", "train.txt", "valid.txt"]
    )
    ogb = tmp_path / "ogb" / "ogbl_biokg"
    for sub in ("raw", "processed", "split/random"):
        (ogb / sub).mkdir(parents=True)
        (ogb / sub / "x.csv").write_text("1")
    cfg.data.source, cfg.data.raw_path = "ogb:biokg", str(tmp_path / "ogb")
    # processed/ is OGB's own cache of raw/, not a source
    want = ["ogbl_biokg/raw/x.csv", "ogbl_biokg/split/random/x.csv"]
    assert sorted(source_files(spec_for(cfg))) == want


def test_hetionet_schema_reads_and_records_the_configured_node_table(tmp_path, shared_data):
    raw = shared_data / "hetionet"
    nodes = raw / "hetionet-v1.0-nodes.tsv"
    real = {ln.split("\t")[0] for ln in nodes.read_text().splitlines()[1:]}
    cfg = Config(storage_root=str(tmp_path / "storage"))
    cfg.data.name, cfg.data.source = "hs", "synthetic:hetionet_schema"
    cfg.data.raw_path, cfg.data.synthetic = str(raw), {"scale": 0.001}
    path = ensure_dataset(cfg, progress=False)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["source"]["node_table"] == str(raw.resolve() / nodes.name)
    assert list(manifest["source"]["record"]["files"]) == [nodes.name]
    generated = re.compile(r"[A-Za-z ]+::\d+")  # the generated table's ids: Kind::i
    names = set(open_dataset(path).graph_data("train").entity_names)
    assert names <= real and any(not generated.fullmatch(n) for n in names)
    cfg.data.name, cfg.data.raw_path = "hs_generated", None  # without: a generated table
    gen = open_dataset(ensure_dataset(cfg, progress=False))
    assert gen.source["node_table"] == "generated" and gen.source["record"]["files"] == {}
    assert all(generated.fullmatch(n) for n in gen.graph_data("train").entity_names)
