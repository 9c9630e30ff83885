"""Which answers a pruned C-MPNN visits.

Pruned propagation (:mod:`cmpnn_dist.model.pruned`) updates only the nodes it selects; a
candidate it never reaches keeps the zero state and, with both priors off
(``model.pruned.unvisited`` and ``model.prior``, which score candidates but do not choose the
subgraph), scores exactly the constant ``decoder(0, z_q)``.  So an answer v of query (u, q)
was visited iff

    s(v | u, q) != decoder(0, z_q),   or v = u (the source is where propagation starts).

A dense model visits every node.
"""

from __future__ import annotations

import numpy as np
import torch

from cmpnn_dist.graph import Graph


def answers_visited(
    model: torch.nn.Module,
    graph: Graph,
    sources: torch.Tensor,
    rels: torch.Tensor,
    answers: torch.Tensor,
    batch_size: int = 32,
) -> np.ndarray:
    """bool [Q]: ``model`` (a :class:`~cmpnn_dist.model.CMPNN`, in eval mode) visits
    ``answers[i]`` when it propagates from ``sources[i]`` under relation ``rels[i]`` (all [Q]
    long).  The priors are switched off for the call and restored after it."""
    pruned = model.pruned
    if pruned is None:
        return np.ones(len(sources), dtype=bool)
    prior, pruned.unvisited = pruned.unvisited, None
    every, model.prior = model.prior, None
    out = []
    try:
        with torch.no_grad():
            for i in range(0, len(sources), batch_size):
                s, r, a = (x[i : i + batch_size] for x in (sources, rels, answers))
                logits = model(graph, s, r)
                z = model.query(r)
                const = model.decoder(z.new_zeros(len(s), 1, z.shape[1]), z)  # [b, 1]
                seen = logits != const.to(logits.dtype)
                seen[torch.arange(len(s)), s] = True
                out.append(seen[torch.arange(len(s)), a])
    finally:
        pruned.unvisited = prior
        model.prior = every
    return torch.cat(out).numpy()
