"""The benchmarks' synthetic graphs.

- :func:`load_graph`: the biokg-scale graph (93,773 nodes, 51 relations and their inverses,
  ``cmpnn_dist.convert.synthetic.biokg_scale``), generated once and cached as ``.npz``: the
  graph of the one-layer, training-step, edge-mask and profile benchmarks;
- :func:`small_graph`: 60 nodes and 400 random facts with one hub receiving 100 of them, for a
  benchmark's ``--small`` run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from cmpnn_dist.graph import Graph

N_NODES, N_REL = 93_773, 51


def small_graph() -> Graph:
    """60 nodes, 400 random facts, one hub receiving 100 of them (``--small``)."""
    from cmpnn_dist.graph import graph_from_triples

    rng = np.random.default_rng(0)
    h, r, t = (rng.integers(0, k, 400) for k in (60, 6, 60))
    t[:100] = 0
    return graph_from_triples(60, 6, np.unique(np.stack([h, r, t], 1), axis=0))


def load_graph(cache: Path) -> Graph:
    """The biokg-scale graph (generated once, cached as .npz)."""
    if cache.exists():
        z = np.load(cache)
        arrays = [torch.from_numpy(z[k].astype(np.int64)) for k in ("indptr", "src", "rel")]
        return Graph(N_NODES, 2 * N_REL, *arrays)
    from cmpnn_dist.convert.synthetic.biokg_scale import generate
    from cmpnn_dist.graph import build_csr

    facts = generate({})["facts"]["train"]
    indptr, src, rel = build_csr(N_NODES, N_REL, facts)
    tmp = cache.with_suffix(".tmp.npz")
    np.savez(tmp, indptr=indptr, src=src.astype(np.int32), rel=rel.astype(np.int16))
    os.replace(tmp, cache)
    return Graph(N_NODES, 2 * N_REL, *(torch.from_numpy(a) for a in (indptr, src, rel)))
