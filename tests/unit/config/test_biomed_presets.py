"""conf/biokg.yaml and conf/hetionet.yaml against the paper's hyperparameter table
(appendix, biomedical datasets), their missing-data errors, and the eval option checks."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cmpnn_dist.cli.common import compose_config
from cmpnn_dist.config import Config
from cmpnn_dist.training.data import train_data_from_triples
from cmpnn_dist.training.validation import check_eval_options
from tests.helpers.paths import REPO_ROOT as REPO

# paper table "Hyperparameters for the transductive experiments on biomedical knowledge graphs"
PAPER = {
    "hetionet": dict(layers=4, hidden=32, decoder=32, lr=2e-3, batch=64, negatives=32, temp=1.0),
    "biokg": dict(layers=6, hidden=32, decoder=32, lr=2e-4, batch=8, negatives=32, temp=0.5),
}


@pytest.mark.parametrize("preset", sorted(PAPER))
def test_preset_is_the_papers_table(preset):
    cfg = compose_config(preset, [])
    want = PAPER[preset]
    m, t = cfg.model, cfg.train
    assert (m.aggregate, m.message, m.init, m.readout) == ("sum", 1, 2, "none")  # basic C-MPNN
    assert (m.num_layers, m.hidden_dim, m.decoder_hidden_dim) == (
        want["layers"], want["hidden"], want["decoder"],
    )  # fmt: skip
    assert (t.lr, t.batch_size, t.num_negatives) == (want["lr"], want["batch"], want["negatives"])
    assert t.adversarial_temperature == want["temp"] and t.epochs == 1 and t.max_steps is None
    assert t.remove_query_edges == "one_hop"  # "discard the edges that directly connect query
    assert t.negatives == "typed"  # node pairs"
    assert cfg.eval.max_queries is None  # the whole split
    text = (REPO / "conf" / f"{preset}.yaml").read_text()
    assert "train.max_steps=" in text  # the quick-run budget is documented
    assert "published" not in text


def test_hetionet_preset_names_pykeens_split():
    text = (REPO / "conf" / "hetionet.yaml").read_text()
    assert "PyKEEN" in text and "1,800,157" in text and "random_state 0" in text


@pytest.mark.integration
@pytest.mark.parametrize(
    "preset, needle",
    [("biokg", "ogbl_biokg/split/random/train.pt"), ("hetionet", "hetionet-v1.0-edges.sif.gz")],
)
def test_preset_without_data_says_where_to_put_it(tmp_path, preset, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.train", f"conf={preset}", f"storage_root={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert needle in lines[0] and str(tmp_path / "raw") in lines[0]
    if preset == "biokg":
        assert "LinkPropPredDataset" in lines[0]  # ogb's loader downloads where there is network
    assert not (tmp_path / "datasets").exists()


def test_eval_options_are_checked_against_the_data():
    facts = torch.tensor([[0, 0, 1], [1, 0, 2], [2, 1, 0], [3, 1, 1]])
    data = train_data_from_triples(4, 2, facts, facts[:1], facts[1:2])  # untyped, no negatives
    check_eval_options(Config(), data)
    for section, key, value, message in (
        ("eval", "protocol", "typed", "needs node types"),
        ("eval", "protocol", "ogb", "official negatives"),
        ("eval", "protocol", "filtered", "eval.protocol"),
        ("eval", "ties", "optimistic", "eval.ties"),
        ("train", "negatives", "by_type", "train.negatives"),
    ):
        cfg = Config()
        setattr(getattr(cfg, section), key, value)
        with pytest.raises(ValueError, match=message):
            check_eval_options(cfg, data)
