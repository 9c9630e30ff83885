"""The batched C-MPNN equals a slow per-pair implementation written from the paper's equations.

The slow version scores one query (u, q) at a time with plain Python loops over nodes and
edges, using the model's own parameters (so only the computation differs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cmpnn_dist.config import ModelConfig, OpsConfig
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.model import CMPNN

NUM_REL = 2
NUM_NODES = 7


def slow_message(msg_fn, z: torch.Tensor, r: int, h_w: torch.Tensor) -> torch.Tensor:
    """MSG_r(h_w, z_q) for one edge from the equations (MSG 1-3: a [d, d] operator;
    TransE: h + W_r z_q; RotatE: complex h times e^{i W_r z_q})."""
    if msg_fn.name == "transe":
        return h_w + msg_fn.relation_linear(z).view(-1, h_w.numel())[r]
    if msg_fn.name == "rotate":
        half = h_w.numel() // 2
        theta = msg_fn.phase_linear(z).view(-1, half)[r]
        c = torch.complex(h_w[:half], h_w[half:]) * torch.exp(1j * theta)
        return torch.cat([c.real, c.imag])
    return msg_fn.relation_matrix(z.unsqueeze(0), 0, r) @ h_w


def slow_scores(model: CMPNN, edges: list[tuple[int, int, int]], u: int, q: int) -> torch.Tensor:
    """Scores [N] of every v for the query (u, q); ``edges`` lists kept (src, rel, dst)."""
    cfg = model.cfg
    z = model.query.weight[q]
    d = z.numel()
    h0 = [torch.zeros(d, dtype=z.dtype) for _ in range(NUM_NODES)]
    if cfg.init == 1:
        h0[u] = torch.ones(d, dtype=z.dtype)
    elif cfg.init == 2:
        h0[u] = z.clone()
    h = list(h0)
    for layer in model.layers:
        hist = h if cfg.history == "t" else h0
        degree = [sum(1 for (_, _, t) in edges if t == v) for v in range(NUM_NODES)]
        delta = sum(math.log(k + 1) for k in degree) / NUM_NODES
        readout = torch.zeros(d, dtype=z.dtype)
        if cfg.readout == "sum":
            total = torch.zeros(d, dtype=z.dtype)
            for w in range(NUM_NODES):
                total = total + h[w]
            readout = layer.readout.w1.weight @ total
        elif cfg.readout == "relation":
            v_in = {t for (_, r, t) in edges if r == q}
            v_out = {s for (s, r, _) in edges if r == q}
            s_in = sum((h[w] for w in v_in), torch.zeros(d, dtype=z.dtype))
            s_out = sum((h[w] for w in v_out), torch.zeros(d, dtype=z.dtype))
            readout = layer.readout.w1.weight @ s_in + layer.readout.w2.weight @ s_out
        new_h = []
        for v in range(NUM_NODES):
            msgs = []
            for s, r, t in edges:
                if t == v:
                    msgs.append(slow_message(layer.message, z, r, h[s]))
            zero = torch.zeros(d, dtype=z.dtype)
            if cfg.aggregate == "sum":
                agg = sum(msgs, zero)
            elif cfg.aggregate == "mean":
                agg = sum(msgs, zero) / max(len(msgs), 1)
            elif cfg.aggregate == "max":
                agg = torch.stack(msgs).max(0).values if msgs else zero
            else:  # pna
                n = max(len(msgs), 1)
                mean = sum(msgs, zero) / n
                sq = sum((m * m for m in msgs), zero) / n
                mx = torch.stack(msgs).max(0).values if msgs else zero
                mn = torch.stack(msgs).min(0).values if msgs else zero
                std = torch.sqrt(torch.relu(sq - mean * mean) + 1e-6)
                stats = torch.cat([mean, mx, mn, std])
                scale = math.log(degree[v] + 1) / delta
                agg = torch.cat([stats, stats * scale, stats / max(scale, 1e-2)])
            pre = layer.linear(torch.cat([hist[v], agg])) + readout
            if cfg.layer_norm:
                pre = torch.nn.functional.layer_norm(
                    pre, (d,), layer.norm.weight, layer.norm.bias, layer.norm.eps
                )
            out = torch.relu(pre)
            new_h.append(out + h[v] if cfg.shortcut else out)
        h = new_h
    dec = model.decoder
    return torch.stack(
        [dec.out(torch.relu(dec.hidden(torch.cat([h[v], z])))).squeeze() for v in range(NUM_NODES)]
    )


CONFIGS = [
    dict(),
    dict(init=1, message=2, aggregate="mean", history="0", readout="sum"),
    dict(message=3, num_bases=2, aggregate="pna", readout="relation"),
    dict(message=3, aggregate="max", layer_norm=False, shortcut=False),
    dict(init=0, aggregate="pna", readout="sum"),
    dict(message="transe", aggregate="pna"),
    dict(message="rotate", aggregate="max", readout="relation"),
    dict(message="linear", num_bases=2),
]


@pytest.mark.parametrize(
    "options", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_batched_equals_per_pair(options):
    rng = np.random.default_rng(11)
    facts = np.unique(
        np.stack([rng.integers(0, 6, 10), rng.integers(0, NUM_REL, 10), rng.integers(0, 6, 10)], 1),
        axis=0,
    )  # node 6 stays isolated
    graph = graph_from_triples(NUM_NODES, NUM_REL, facts)
    cfg = ModelConfig(num_layers=2, hidden_dim=4, decoder_hidden_dim=5, **options)
    torch.manual_seed(0)
    model = CMPNN(cfg, NUM_REL, OpsConfig(impl="reference", chunk_elements=16)).double()
    heads = torch.tensor([0, 2, 4, 6, 1])
    rels = torch.tensor([0, 1, 2, 3, 1])
    mask = graph.query_edge_mask(torch.from_numpy(facts[:1]), "query")
    dst = graph.dst()
    edges = [
        (int(graph.src[e]), int(graph.rel[e]), int(dst[e]))
        for e in range(graph.num_edges)
        if mask[e]
    ]
    with torch.no_grad():
        batched = model(graph, heads, rels, edge_mask=mask)
        for b in range(len(heads)):
            slow = slow_scores(model, edges, int(heads[b]), int(rels[b]))
            torch.testing.assert_close(batched[b], slow)
