"""Fast destination-sorted CSR construction (same output as :func:`cmpnn_dist.graph.build_csr`).

Every edge ``src -rel-> dst`` (facts plus inverses ``rel + |R|``) gets the single int64 key
``(dst * N + src) * R2 + rel`` (``R2 = 2|R|``); one ``torch.sort`` of the keys orders edges by
``(dst, src, rel)``, exactly the order of ``build_csr``'s ``lexsort``, and the key decodes back
to ``(dst, src, rel)``.  ``torch.sort`` is multi-threaded and ~3x faster than ``np.lexsort``
at biokg scale; when ``N * N * R2`` overflows int64 we fall back to ``build_csr``.
"""

from __future__ import annotations

import numpy as np
import torch

from cmpnn_dist.graph import build_csr

_INT64_MAX = np.iinfo(np.int64).max


def fast_csr(
    num_nodes: int, num_relations: int, triples: np.ndarray, add_inverse: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr [N+1], src [E], rel [E])`` int64, rows by destination, sorted by (src, rel).

    Args:
        num_nodes: N.  num_relations: |R| (without inverses).
        triples: int64 [F, 3] facts ``(h, r, t)`` with ids in range.
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    r2 = num_relations * (2 if add_inverse else 1)
    n = max(int(num_nodes), 1)
    if n * n > _INT64_MAX // max(r2, 1):
        return build_csr(num_nodes, num_relations, triples, add_inverse)
    t = torch.from_numpy(triples)
    h, r, tl = t[:, 0], t[:, 1], t[:, 2]
    fwd = (tl * n + h) * r2 + r
    if add_inverse:
        inv = (h * n + tl) * r2 + (r + num_relations)
        keys = torch.cat([fwd, inv])
    else:
        keys = fwd.clone()
    keys = torch.sort(keys).values
    rel = keys % r2
    rest = keys // r2
    src = rest % n
    dst = rest // n
    counts = torch.bincount(dst, minlength=num_nodes)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=indptr[1:])
    return indptr.numpy(), src.numpy(), rel.numpy()
