"""Small graphs the tests share."""

from __future__ import annotations

import numpy as np

from cmpnn_dist.graph import Graph, graph_from_triples


def hub_graph(num_nodes: int = 12, num_rel: int = 3, seed: int = 0) -> Graph:
    """Random facts plus a hub (node 0 receives from almost everyone) and isolated nodes 10, 11."""
    rng = np.random.default_rng(seed)
    facts = [
        (int(h), int(r), int(t))
        for h, r, t in zip(
            rng.integers(1, 9, 20),
            rng.integers(0, num_rel, 20),
            rng.integers(1, 9, 20),
            strict=True,
        )
    ]
    facts += [(h, h % num_rel, 0) for h in range(1, 10)]  # hub: 9 in-edges, 9 out (inverse)
    facts = sorted(set(facts))
    return graph_from_triples(num_nodes, num_rel, np.array(facts))
