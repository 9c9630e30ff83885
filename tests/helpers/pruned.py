"""The pruned-propagation tests' shared set-up: a small graph, a pruned model beside the dense
one with the same parameters, the design space it is checked over, and the slow per-query
reference (loops, no batching) the pruned subgraph is compared with."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from cmpnn_dist.config import ModelConfig, OpsConfig, PruneConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN
from cmpnn_dist.model.init import head_states

NUM_REL = 3
NUM_NODES = 14


def cfg_of(prune: dict | None = None, **kw) -> ModelConfig:
    base = dict(num_layers=3, hidden_dim=8, decoder_hidden_dim=8)
    base.update(kw)
    return ModelConfig(**base, propagation="pruned", prune=PruneConfig(**(prune or {})))


def graph(seed: int = 0, num_nodes: int = NUM_NODES, num_facts: int = 40):
    rng = np.random.default_rng(seed)
    facts = np.stack(
        [
            rng.integers(0, num_nodes, num_facts),
            rng.integers(0, NUM_REL, num_facts),
            rng.integers(0, num_nodes, num_facts),
        ],
        1,
    )
    return graph_from_triples(num_nodes, NUM_REL, np.unique(facts, axis=0))


def pair(cfg: ModelConfig, seed: int = 0) -> tuple[CMPNN, CMPNN]:
    """(pruned model, dense model) with the same dense parameters."""
    torch.manual_seed(seed)
    pruned = CMPNN(cfg, NUM_REL, OpsConfig(impl="reference", chunk_elements=1 << 16)).double()
    dense_cfg = dataclasses.replace(cfg, propagation="dense")
    dense = CMPNN(dense_cfg, NUM_REL, OpsConfig(impl="reference", chunk_elements=1 << 16)).double()
    missing = dense.load_state_dict(
        {k: v for k, v in pruned.state_dict().items() if not k.startswith("pruned.")}
    )
    assert not missing.missing_keys and not missing.unexpected_keys
    return pruned, dense


QUERIES = (torch.tensor([0, 3, 5, 7, 3]), torch.tensor([0, 1, 4, 5, 2]))
BASE = dict(init=2, message=1, aggregate="sum", history="t", readout="none")


def design_axes() -> dict[str, list]:
    """Every value of every axis of the design space, read from the registries (messages,
    aggregations) and the config's choices (INIT, history, readout, prior): a new one is
    covered without editing this file.  INIT 0 is left out: pruned propagation refuses it
    (``tests/unit/model/test_pruned.py::test_refusals``)."""
    from cmpnn_dist.config import History, Init, ModelPrior, Readout, choices
    from cmpnn_dist.model import aggregations, messages

    return {
        "init": [k for k in choices(Init) if k != 0],
        "message": messages.names(),
        "aggregate": aggregations.names(),
        "history": choices(History),
        "readout": choices(Readout),
        "prior": choices(ModelPrior),
        "layer_norm": [True, False],
        "shortcut": [True, False],
    }


def design_space() -> list[dict]:
    """Every value of every axis from the base; every message with PNA and the relation
    readout (the widest combination); MSG 3 with a basis decomposition.  No duplicates."""
    axes = design_axes()
    out = [dict(BASE, **{axis: v}) for axis, values in axes.items() for v in values]
    for msg in axes["message"]:
        out.append(dict(BASE, message=msg, aggregate="pna", readout="relation", history="0"))
    out.append(dict(BASE, message="linear", num_bases=2, aggregate="max", readout="sum", init=3))
    return [kw for i, kw in enumerate(out) if kw not in out[:i]]


def slow_pruned(model: CMPNN, g, head: int, rel: int, scale: float = 1.0):
    """One query by hand: dense [N, 1, d] states, the senders / edges picked by loops."""
    pr, cfg = model.pruned, model.cfg
    n, (k, e) = g.num_nodes, pr.budgets(g)
    z = model.query(torch.tensor([rel]))
    h = torch.zeros(n, 1, cfg.hidden_dim, dtype=z.dtype)
    h[head, 0] = head_states(cfg.init, z)[0]
    visited = {head}
    src, dst = g.src.tolist(), g.dst().tolist()
    for layer in model.layers:
        prio = pr.score(h[:, 0], z.expand(n, -1), model.decoder).detach()
        order = sorted(visited, key=lambda v: (-float(prio[v]), v))
        senders = order[:k]
        cand = [i for i in range(g.num_edges) if src[i] in senders]
        cand.sort(key=lambda i: (src[i], i))  # out-edges by sender id, then edge id
        cand = sorted(cand, key=lambda i: -float(prio[dst[i]]))[:e]  # stable: ties keep order
        mask = torch.zeros(g.num_edges, dtype=torch.bool)
        mask[cand] = True
        sig = torch.sigmoid(pr.score(h[:, 0], z.expand(n, -1), model.decoder))
        gate = sig if pr.prune.gate == "sigmoid" else 1 + (sig - sig.detach())
        x = h * gate.view(n, 1, 1) * scale
        new = layer(g, x, h, z, edge_mask=mask)
        new = new - x + h if layer.shortcut else new  # the shortcut adds the ungated state
        touched = set(senders) | {dst[i] for i in cand}
        rows = torch.tensor(sorted(touched))
        h = h.clone()
        h[rows] = new[rows]
        visited |= touched
    logits = model.decoder(h.transpose(0, 1), z)[0]
    unvisited = [v for v in range(n) if v not in visited]
    return logits, unvisited


def cli_error_lines(tmp_path, *overrides: str) -> list[str]:
    """stderr lines of ``python -m cmpnn_dist.train <overrides>``, which must exit 2 (a config
    error) and write nothing under ``tmp_path`` (its storage root)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.train", *overrides, f"storage_root={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert not any(tmp_path.iterdir())
    return proc.stderr.strip().splitlines()
