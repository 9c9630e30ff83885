"""A small training set-up the tests share: the rule-planted graph, a tiny config, a crash
at a chosen step, and how two runs are compared."""

from __future__ import annotations

import torch

from cmpnn_dist.config import Config
from cmpnn_dist.training.data import TrainData, train_data_from_triples


def rule_kg(num_nodes: int = 48, seed: int = 0) -> TrainData:
    """Planted rules over a random relation 0 ("parent"):
    1: child(y, x) <= parent(x, y);   2: grandparent(x, z) <= parent(x, y), parent(y, z).
    Facts are split 80/10/10 per relation (relation 0 stays in training)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_nodes * 2,), generator=g)
    dst = torch.randint(0, num_nodes, (num_nodes * 2,), generator=g)
    keep = src != dst
    parent = torch.unique(torch.stack([src[keep], dst[keep]], 1), dim=0)
    facts = [(int(a), 0, int(b)) for a, b in parent]
    facts += [(int(b), 1, int(a)) for a, b in parent]
    children: dict[int, list[int]] = {}
    for a, b in parent.tolist():
        children.setdefault(a, []).append(b)
    gp = {(a, c) for a, bs in children.items() for b in bs for c in children.get(b, []) if a != c}
    facts += [(a, 2, c) for a, c in sorted(gp)]
    facts_t = torch.tensor(sorted(set(facts)))
    perm = torch.randperm(len(facts_t), generator=g)
    facts_t = facts_t[perm]
    is_rule = facts_t[:, 1] > 0
    rule = facts_t[is_rule]
    n_eval = len(rule) // 10
    valid, test = rule[:n_eval], rule[n_eval : 2 * n_eval]
    train = torch.cat([facts_t[~is_rule], rule[2 * n_eval :]])
    return train_data_from_triples(num_nodes, 3, train, valid, test)


def small_cfg(**train) -> Config:
    """A 2-layer, 8-dim C-MPNN on the reference ops, 2 epochs, checkpoints every 5 steps;
    ``train`` overrides keys of ``cfg.train``."""
    cfg = Config()
    cfg.model.init = 3  # draws eps ~ N(0, 1) from the torch RNG: resume must restore it
    cfg.model.num_layers = 2
    cfg.model.hidden_dim = 8
    cfg.model.decoder_hidden_dim = 8
    cfg.ops.impl = "reference"
    cfg.train.batch_size = 8
    cfg.train.num_negatives = 8
    cfg.train.epochs = 2
    cfg.train.deterministic = True
    cfg.train.progress = False
    cfg.eval.batch_size = 64
    cfg.checkpoint.every_steps = 5
    cfg.checkpoint.keep_last = 2
    for k, v in train.items():
        setattr(cfg.train, k, v)
    return cfg


class Crash(Exception):
    """The failure :func:`crash_at` raises."""


def crash_at(step: int):
    """An ``on_step`` hook that raises :class:`Crash` after step ``step``."""

    def hook(s: int) -> None:
        if s == step:
            raise Crash(f"simulated failure after step {s}")

    return hook


def train_rows(history: list[dict]) -> list[tuple]:
    """(step, epoch, loss) of each training row of a run's history."""
    return [(r["step"], r["epoch"], r["loss"]) for r in history if r["kind"] == "train"]


def assert_same_weights(a: dict, b: dict) -> None:
    """Equal keys and bit-identical tensors."""
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
