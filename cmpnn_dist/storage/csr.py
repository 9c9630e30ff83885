"""Fast destination-sorted CSR construction (same output as :func:`cmpnn_dist.graph.build_csr`).

Every edge ``src -rel-> dst`` (facts plus inverses ``rel + |R|``) gets the single int64 key
``dst << (bn + br) | src << br | rel`` (``bn, br`` = bits of ``N - 1`` and ``R2 - 1``,
``R2 = 2|R|``); one ``torch.sort`` of the keys orders edges by ``(dst, src, rel)``, exactly the
order of ``build_csr``'s ``lexsort``, and shifts / masks decode the key.  ``torch.sort`` is
~3x faster than ``np.lexsort`` at biokg scale; when the key needs more than 63 bits we fall
back to ``build_csr``.
"""

from __future__ import annotations

import numpy as np
import torch

from cmpnn_dist.graph import build_csr

_INT64_MAX = np.iinfo(np.int64).max


def bits(count: int) -> int:
    """Bits needed to hold the values ``0 .. count - 1`` (at least 1)."""
    return max(1, int(count - 1).bit_length())


def fast_csr(
    num_nodes: int, num_relations: int, triples: np.ndarray, add_inverse: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr [N+1], src [E], rel [E])`` int64, rows by destination, sorted by (src, rel).

    Args:
        num_nodes: N.  num_relations: |R| (without inverses).
        triples: int64 [F, 3] facts ``(h, r, t)`` with ids in range.
    """
    return csr_and_duplicates(num_nodes, num_relations, triples, add_inverse)[:3]


def csr_and_duplicates(
    num_nodes: int, num_relations: int, triples: np.ndarray, add_inverse: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`fast_csr` plus the number of repeated edges (equal neighbours after the sort).

    A repeated fact repeats its edge and its inverse, so converters learn for free whether
    the training facts need de-duplication.
    """
    triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    r2 = num_relations * (2 if add_inverse else 1)
    bn, br = bits(num_nodes), bits(r2)
    if (1 << (2 * bn + br)) - 1 > _INT64_MAX:
        indptr, src, rel = build_csr(num_nodes, num_relations, triples, add_inverse)
        dst = np.repeat(np.arange(num_nodes), np.diff(indptr))
        same = (src[1:] == src[:-1]) & (rel[1:] == rel[:-1]) & (dst[1:] == dst[:-1])
        return indptr, src, rel, int(same.sum())
    t = torch.from_numpy(triples)
    h, r, tl = t[:, 0], t[:, 1], t[:, 2]
    fwd = (tl << (bn + br)) | (h << br) | r
    if add_inverse:
        inv = (h << (bn + br)) | (tl << br) | (r + num_relations)
        keys = torch.cat([fwd, inv])
    else:
        keys = fwd
    keys = torch.sort(keys).values
    dups = int((keys[1:] == keys[:-1]).sum()) if len(keys) > 1 else 0
    rel = keys & ((1 << br) - 1)
    src = (keys >> br) & ((1 << bn) - 1)
    dst = keys >> (bn + br)
    counts = torch.bincount(dst, minlength=num_nodes)
    indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=indptr[1:])
    return indptr.numpy(), src.numpy(), rel.numpy(), dups
