"""PyKEEN's default random split of one triple set, reimplemented (no PyKEEN needed).

PyKEEN (1.11; ``TriplesFactory.from_labeled_triples`` + ``TriplesFactory.split`` with its
default ``CoverageSplitter``) turns a labelled triple list into train / test / validation as:

1. ids: entities and relations numbered by their sorted labels (only entities that occur in a
   triple get an id); the id triples are de-duplicated and sorted lexicographically by
   ``(h, r, t)`` (``numpy.unique(axis=0)``); row ``i`` of that array is triple ``i``.
2. sizes: for ratios ``p_1..p_k`` (a remainder ``1 - sum`` is appended when they sum to less
   than 1), ``c_j = p_1 + ... + p_j`` (``c_k := 1``), cut points ``floor(c_j * n)`` and
   ``size_j = floor(c_j n) - floor(c_{j-1} n)``.  Hetionet: n = 2,250,197 gives
   1,800,157 / 225,020 / 225,020.
3. cover (deterministic, greedy): the lowest-index triple of every relation; then, for every
   head not yet covered (as head or tail) by the chosen triples, its lowest-index triple as a
   head; then the same for tails.  These seed triples go to the first part.
4. the other triples, in index order, are permuted by ``torch.randperm(m, generator)`` with
   ``generator`` seeded with ``random_state`` (PyKEEN seeds the global generator with
   ``torch.manual_seed``; a fresh ``torch.Generator().manual_seed`` gives the same stream) and
   cut into sizes ``(size_1 - |seed|, size_2, ...)``; the first part is ``seed ++ part_1``.

PyKEEN's ``Dataset`` classes unpack the parts as ``training, testing, validation``: with
ratios (0.8, 0.1, 0.1) the *second* part is the test split and the third the validation split.
The permutation is ``torch.randperm``'s, so the split is reproducible for a given torch
release (as PyKEEN's own is).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch

from cmpnn_dist.arrays import sorted_unique
from cmpnn_dist.storage.errors import StorageError

INVERSE_SUFFIX = "_inverse"  # PyKEEN orders "r" before "r_inverse"


def relation_order(names: Sequence[str]) -> list[str]:
    """PyKEEN's relation label order: sorted by (label without ``_inverse``, has suffix)."""
    return sorted(
        set(names),
        key=lambda x: (re.sub(f"{INVERSE_SUFFIX}$", "", x), x.endswith(INVERSE_SUFFIX)),
    )


def normalize_ratios(ratios: float | Sequence[float], eps: float = 1e-6) -> tuple[float, ...]:
    """Ratios as a tuple summing to 1 (the remainder appended); more than 1 is an error."""
    r = (float(ratios),) if isinstance(ratios, (int, float)) else tuple(map(float, ratios))
    total = sum(r)
    if total < 1.0 - eps:
        r = r + (1.0 - total,)
    elif total > 1.0 + eps:
        raise StorageError(f"split ratios {list(r)} sum to {total} > 1")
    if any(x < 0 for x in r):
        raise StorageError(f"split ratios must be >= 0, got {list(r)}")
    return r


def split_sizes(n: int, ratios: float | Sequence[float]) -> tuple[int, ...]:
    """Absolute part sizes (step 2 of the module docstring); they sum to ``n``."""
    cum = np.cumsum(np.asarray(normalize_ratios(ratios), dtype=np.float64))
    cum[-1] = 1.0
    points = (np.concatenate([np.zeros(1), cum]) * n).astype(np.int64)
    return tuple(int(x) for x in np.diff(points))


def canonical_triples(triples: np.ndarray, num_entities: int, num_relations: int) -> np.ndarray:
    """int64 [F', 3]: the distinct rows of ``triples`` sorted by (h, r, t) (step 1)."""
    t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    if num_entities * num_entities * max(num_relations, 1) < 2**62:
        n, r = np.int64(num_entities), np.int64(max(num_relations, 1))
        keys = sorted_unique((t[:, 0] * r + t[:, 1]) * n + t[:, 2])
        hr, tail = np.divmod(keys, n)
        head, rel = np.divmod(hr, r)
        return np.stack([head, rel, tail], axis=1)
    return np.unique(t, axis=0)


def coverage_mask(triples: np.ndarray, num_entities: int) -> np.ndarray:
    """bool [F]: the greedy cover of step 3 (``triples`` in canonical order)."""
    t = np.asarray(triples, dtype=np.int64)
    chosen = np.zeros(len(t), dtype=bool)
    if not len(t):
        return chosen
    _, first = np.unique(t[:, 1], return_index=True)  # first occurrence = lowest index
    chosen[first] = True
    for col in (0, 2):
        covered = np.zeros(num_entities, dtype=bool)
        covered[t[chosen][:, [0, 2]].ravel()] = True
        cand = np.flatnonzero(~covered[t[:, col]])
        _, first = np.unique(t[cand, col], return_index=True)
        chosen[cand[first]] = True
    return chosen


def coverage_split(
    triples: np.ndarray,
    num_entities: int,
    ratios: float | Sequence[float] = (0.8, 0.1, 0.1),
    random_state: int = 0,
) -> list[np.ndarray]:
    """Split canonical triples int64 [F, 3] into parts int64 [F_j, 3] as PyKEEN does.

    Args:
        triples: output of :func:`canonical_triples` (sorted, distinct).
        num_entities: number of entity ids (every id < this).
        ratios: part ratios, PyKEEN's convention (see :func:`normalize_ratios`).
        random_state: seed of the torch generator that permutes the non-seed triples.

    Returns:
        ``[part_1, part_2, ...]`` in PyKEEN's order (for a ``Dataset``: training, testing,
        validation); the first holds every entity and relation.
    """
    t = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
    sizes = split_sizes(len(t), ratios)
    seed_mask = coverage_mask(t, num_entities)
    seed, rest = t[seed_mask], t[~seed_mask]
    if len(seed) > sizes[0]:
        raise StorageError(
            f"no split with every entity and relation in training: the cover needs "
            f"{len(seed)} triples, the first part has only {sizes[0]}"
        )
    rest_sizes = (sizes[0] - len(seed), *sizes[1:])
    gen = torch.Generator().manual_seed(int(random_state))
    perm = torch.randperm(len(rest), generator=gen).numpy()
    parts = np.split(rest[perm], np.cumsum(rest_sizes)[:-1])
    parts[0] = np.concatenate([seed, parts[0]])
    return [np.ascontiguousarray(p) for p in parts]
