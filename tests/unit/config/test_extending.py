"""docs/extending.md's four worked examples, each copied into a temporary file and imported as
a new module (adding one is one file): the schema accepts the new name, and the new message /
aggregation / protocol / dataset source computes what a reference computes.

* message ``sub`` (h - W_r z_q) equals ``transe`` (h + W_r z_q) with W_r negated;
* aggregation ``min`` equals a loop over each node's incoming messages (0 when it has none);
* protocol ``raw`` equals a loop over every candidate, known facts included;
* source ``csv:facts``, built by ``ensure_dataset`` and by the convert CLI, holds the CSV file's
  entities, relations and facts (split by row number), read back from the written dataset.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cmpnn_dist.cli.convert import main as convert_main
from cmpnn_dist.config import Config, ConfigError, ModelConfig, OpsConfig, validate
from cmpnn_dist.config import registry as config_registry
from cmpnn_dist.convert import sources
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.convert.sources import base as source_base
from cmpnn_dist.errors import UsageError
from cmpnn_dist.evaluation import protocols, rank_split
from cmpnn_dist.evaluation.protocols import base as protocol_base
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN, aggregations, messages
from cmpnn_dist.model.aggregations import base as aggregation_base
from cmpnn_dist.model.messages import base as message_base
from cmpnn_dist.ops import messages as ops_messages
from cmpnn_dist.ops import propagate
from cmpnn_dist.storage import open_dataset
from tests.helpers.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "extending.md"


def example(heading: str) -> tuple[str, str]:
    """(file name, code) of the example under ``## ...heading...`` in docs/extending.md."""
    text = DOC.read_text()
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    name = re.search(r"Save as `[^`]*/([a-z_]+\.py)`", section).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    return name, code


@pytest.fixture
def isolated(monkeypatch):
    """Registries and the schema's registered choices as they were before the test."""
    for module in (message_base, aggregation_base, protocol_base, ops_messages, source_base):
        monkeypatch.setattr(module, "_REGISTRY", dict(module._REGISTRY))
    monkeypatch.setattr(message_base, "_NUMBERS", dict(message_base._NUMBERS))
    choices = {k: list(v) for k, v in config_registry._REGISTERED_CHOICES.items()}
    monkeypatch.setattr(config_registry, "_REGISTERED_CHOICES", choices)


def load(heading: str, tmp_path: Path) -> None:
    """Write the example to a temporary file and import it (it registers itself)."""
    name, code = example(heading)
    path = tmp_path / name
    path.write_text(code)
    module = f"_extending_{path.stem}"
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(module, None)


def accepts(key: str, value: str) -> bool:
    cfg = Config()
    section, field = key.split(".")
    setattr(getattr(cfg, section), field, value)
    try:
        validate(cfg)
    except ConfigError:
        return False
    return True


def _graph(num_nodes=10, num_rel=2, seed=0):
    rng = np.random.default_rng(seed)
    facts = np.stack(
        [rng.integers(0, 8, 24), rng.integers(0, num_rel, 24), rng.integers(0, 8, 24)], 1
    )  # nodes 8, 9 have no edges
    return graph_from_triples(num_nodes, num_rel, facts)


def test_a_message_function_from_one_file(isolated, tmp_path):
    assert not accepts("model.message", "sub")
    load("A message function", tmp_path)
    assert "sub" in messages.choices() and accepts("model.message", "sub")
    graph = _graph()
    heads, rels = torch.tensor([0, 3, 5]), torch.tensor([0, 1, 3])
    opts = dict(num_layers=2, hidden_dim=6, decoder_hidden_dim=5)
    torch.manual_seed(0)
    sub = CMPNN(ModelConfig(message="sub", **opts), 2, OpsConfig(impl="auto")).double()
    transe = CMPNN(ModelConfig(message="transe", **opts), 2, OpsConfig(impl="naive")).double()
    state = sub.state_dict()
    for k in state:
        if "relation_linear" in k:  # h - W z = h + (-W) z
            state[k] = -state[k]
    transe.load_state_dict(state)
    want = transe(graph, heads, rels)
    torch.testing.assert_close(sub(graph, heads, rels), want)
    transe.load_state_dict(sub.state_dict())  # same weights, opposite sign: another model
    assert not torch.allclose(transe(graph, heads, rels), want)


def test_an_aggregation_from_one_file(isolated, tmp_path):
    assert not accepts("model.aggregate", "min")
    load("An aggregation", tmp_path)
    assert "min" in aggregations.names() and accepts("model.aggregate", "min")
    agg = aggregations.build("min")
    graph = _graph()
    torch.manual_seed(1)
    x = torch.randn(graph.num_nodes, 2, 3, dtype=torch.float64)
    relation = torch.randn(graph.num_relations, 3, dtype=torch.float64)
    raw = propagate(graph, x, relation, message="mul", aggregators=agg.ops_aggregators)
    want = torch.zeros_like(x)
    src, rel = graph.src.tolist(), graph.rel.tolist()
    for v in range(graph.num_nodes):  # every in-edge of v, from the CSR pointers
        lo, hi = int(graph.indptr[v]), int(graph.indptr[v + 1])
        msgs = [x[src[e]] * relation[rel[e]] for e in range(lo, hi)]
        if msgs:
            want[v] = torch.stack(msgs).min(0).values
    torch.testing.assert_close(agg(raw), want)
    assert agg.out_dim(3) == 3
    model = CMPNN(ModelConfig(aggregate="min", num_layers=1, hidden_dim=4), 2).double()
    assert model(graph, torch.tensor([0]), torch.tensor([1])).shape == (1, graph.num_nodes)


def test_an_evaluation_protocol_from_one_file(isolated, tmp_path):
    assert not accepts("eval.protocol", "raw")
    load("An evaluation protocol", tmp_path)
    assert "raw" in protocols.names() and accepts("eval.protocol", "raw")
    num_nodes, num_rel = 12, 2
    gen = torch.Generator().manual_seed(0)
    table = torch.round(torch.rand(2 * num_rel, num_nodes, num_nodes, generator=gen) * 4)

    class TableModel(torch.nn.Module):
        def forward(self, graph, heads, rels, edge_mask=None):
            return table[rels, heads]

    rng = np.random.default_rng(0)
    facts = torch.from_numpy(
        np.unique(np.stack([rng.integers(0, 12, 30), rng.integers(0, 2, 30),
                            rng.integers(0, 12, 30)], 1), axis=0)
    )  # fmt: skip
    graph = graph_from_triples(num_nodes, num_rel, facts.numpy())
    got = rank_split(
        TableModel(), graph, facts, facts, num_relations=num_rel, protocol="raw", batch_size=3
    )
    want = []
    for direction in ("tail", "head"):
        for h, r, t in facts.tolist():
            u, q, target = (h, r, t) if direction == "tail" else (t, r + num_rel, h)
            s = table[q, u]
            others = [v for v in range(num_nodes) if v != target]
            want.append(1 + sum(int(s[v] >= s[target]) for v in others))  # pessimistic ties
    assert got.rank.tolist() == want
    assert got.candidates.tolist() == [num_nodes - 1] * len(want)
    assert got.protocol == "raw"


def _csv_rows(path: Path) -> list[tuple[str, str, str]]:
    """The reference reading of a CSV file without quoting: non-empty lines split at commas."""
    return [tuple(line.split(",")) for line in path.read_text().splitlines() if line]


def _dataset_facts(path: Path) -> dict[str, set[tuple[str, str, str]]]:
    ds = open_dataset(path, verify=True)
    g = ds.graph_data("train")
    names, rels = g.entity_names, ds.relation_names
    return {
        s: {(names[h], rels[r], names[t]) for h, r, t in g.facts(s).tolist()}
        for s in ("train", "valid", "test")
    }


def test_a_dataset_source_from_one_file(isolated, tmp_path, capsys):
    assert not accepts("data.source", "csv:facts")
    load("A dataset source", tmp_path)
    assert "csv:facts" in sources.names() and accepts("data.source", "csv:facts")
    raw = tmp_path / "my_csv"
    raw.mkdir()
    rows = [(f"e{i % 7}", f"r{i % 3}", f"e{(3 * i + 1) % 11}") for i in range(40)]
    (raw / "facts.csv").write_text("".join(f"{h},{r},{t}\n" for h, r, t in rows) + "\n")
    want = _csv_rows(raw / "facts.csv")
    assert len(want) == 40 and len(set(want)) == 40  # distinct facts: each kept once
    splits = {
        "train": {f for i, f in enumerate(want) if i % 10 < 8},
        "valid": {f for i, f in enumerate(want) if i % 10 == 8},
        "test": {f for i, f in enumerate(want) if i % 10 == 9},
    }

    cfg = Config(storage_root=str(tmp_path / "storage"))
    cfg.data.name, cfg.data.source, cfg.data.raw_path = "my_csv", "csv:facts", str(raw)
    cfg.data.num_shards = 2
    validate(cfg)
    path = ensure_dataset(cfg, progress=False)
    ds = open_dataset(path)
    assert ds.graph_data("train").entity_names == sorted({x for h, _, t in want for x in (h, t)})
    assert ds.relation_names == ["r0", "r1", "r2"] and not ds.inductive
    assert _dataset_facts(path) == splits
    record = ds.source["record"]
    assert record["source"] == "csv:facts" and record["raw_path"] == str(raw.resolve())
    digest = hashlib.sha256((raw / "facts.csv").read_bytes()).hexdigest()
    assert list(record["files"]) == ["facts.csv"]
    assert record["files"]["facts.csv"]["sha256"] == digest

    # the file is the source: a new row rebuilds the dataset on its next use
    with open(raw / "facts.csv", "a") as f:
        f.write("e0,r9,e5\n")
    capsys.readouterr()
    ensure_dataset(cfg, progress=False)
    assert "rebuilding dataset my_csv: " in capsys.readouterr().err
    assert _dataset_facts(path)["train"] == splits["train"] | {("e0", "r9", "e5")}

    # a bad row is one error naming the file and its line, nothing written
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "facts.csv").write_text("a,r,b\na,r\n")
    cfg.data.name, cfg.data.raw_path = "bad", str(bad)
    with pytest.raises(UsageError, match=r"bad/facts\.csv.*line 2: expected head,relation,tail"):
        ensure_dataset(cfg, progress=False)
    assert not (tmp_path / "storage" / "datasets" / "bad").exists()

    # the convert CLI lists and builds it too
    assert convert_main(["csv:facts", str(tmp_path / "cli"), "--raw", str(raw)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["name"] == "my_csv"  # the raw folder's name
    counts = {s: len(f) for s, f in splits.items()}
    assert summary["graphs"]["train"]["facts"] == {**counts, "train": counts["train"] + 1}
    assert _dataset_facts(tmp_path / "cli") == _dataset_facts(path)
