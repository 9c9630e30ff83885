"""The small trained model the prediction and serving tests read."""

from __future__ import annotations

from pathlib import Path

from cmpnn_dist.config import Config


def train_rule_model(root: Path) -> Path:
    """Trains the rule-planted KG model the prediction and serving tests read (300 entities,
    3 layers x 16, 150 steps, one thread: about 10 s); its run folder."""
    from cmpnn_dist.cli.train import train

    cfg = Config()
    cfg.storage_root = str(root)
    cfg.run_name = "rule"
    cfg.data.name = "rule_kg_300"
    cfg.data.synthetic = {"num_entities": 300}
    cfg.model.num_layers = 3
    cfg.model.hidden_dim = 16
    cfg.model.decoder_hidden_dim = 16
    cfg.ops.impl = "reference"
    cfg.train.batch_size = 16
    cfg.train.epochs = 1
    cfg.train.max_steps = 150
    cfg.train.num_negatives = 32
    cfg.train.negatives = "uniform"  # the default preset's (rule_kg has node types)
    cfg.train.lr = 5e-3
    cfg.train.device = "cpu"
    cfg.train.progress = False
    cfg.train.deterministic = True
    cfg.train.num_threads = 1  # the same model whatever the load (the explanation shares below)
    cfg.eval.batch_size = 32
    train(cfg)
    return root / "runs" / "rule"
