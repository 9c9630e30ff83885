"""Which edges to hide while training (``train.remove_query_edges``), read from the data.

``one_hop`` and ``candidates`` hide every edge between the query's head and the scored
entities, the inverse fact of an explicit inverse relation pair included: a graph where
``(h, r, t)`` comes with ``(t, r', h)`` for most facts (NELL-995's ``concept:x`` and its
inverse) trains a model that never sees that fact, while the graph the test facts are ranked
on shows it.  :func:`inverse_relation_pairs` finds such pairs in the training facts and
:func:`edge_removal_warning` says so in one line when one of those modes is on
(docs/datasets.md, "Which edges to hide while training").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# a pair counts when at least this share of each relation's facts has the other's reverse
MIN_SHARE = 0.5
# relations with fewer facts than this are not judged (a handful of facts says little)
MIN_FACTS = 10
# the warning needs pairs covering at least this share of the training facts (FB15k-237 and
# its GraIL splits hold 0.2-3.4 % of such facts, their symmetric relations not counted)
MIN_COVERED = 0.1
HIDING_MODES = ("one_hop", "candidates")


@dataclass(frozen=True)
class InversePair:
    """Relations ``r`` and ``r_inv`` (``r < r_inv``): ``shared`` facts ``(h, r, t)`` whose
    reverse ``(t, r_inv, h)`` is a fact too, out of ``facts_r`` and ``facts_inv``."""

    r: int
    r_inv: int
    shared: int
    facts_r: int
    facts_inv: int


def inverse_relation_pairs(
    facts: Any, num_relations: int, min_share: float = MIN_SHARE, min_facts: int = MIN_FACTS
) -> list[InversePair]:
    """Pairs of distinct relations where ``(h, r, t) <=> (t, r_inv, h)`` holds for at least
    ``min_share`` of each one's facts (symmetric relations, ``r == r_inv``, are not pairs).

    Args:
        facts: int [F, 3] ``(h, r, t)`` (numpy or torch), relation ids ``< num_relations``;
            duplicate facts count once.
        num_relations: |R|.
        min_share: the share of each relation's facts that must have the other's reverse.
        min_facts: relations with fewer facts are left out.

    Returns:
        The pairs, most shared facts first.  O(F log F) time, O(F) memory.
    """
    return _pairs(*_distinct_facts(facts, num_relations), min_share, min_facts)


def _distinct_facts(facts: Any, num_relations: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``(pair, rel, n, num_relations)`` of the distinct facts: pair int64 [F'] the sorted keys
    ``h * n + t`` (n: 1 + the largest entity id), rel int64 [F'] each one's relation."""
    f = np.asarray(facts, dtype=np.int64).reshape(-1, 3)
    if not len(f):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 1, num_relations
    n = int(f[:, [0, 2]].max()) + 1
    pair = f[:, 0] * n + f[:, 2]
    if n * n * num_relations < 2**62:  # one int64 key: a plain sort (lexsort is ~10x slower)
        key = np.sort(pair * num_relations + f[:, 1])
        key = key[np.r_[True, key[1:] != key[:-1]]]
        return key // num_relations, key % num_relations, n, num_relations
    order = np.lexsort((f[:, 1], pair))
    pair, rel = pair[order], f[order, 1]
    new = np.r_[True, (pair[1:] != pair[:-1]) | (rel[1:] != rel[:-1])]
    return pair[new], rel[new], n, num_relations


def _pairs(
    pair: np.ndarray,
    rel: np.ndarray,
    n: int,
    num_relations: int,
    min_share: float,
    min_facts: int,
) -> list[InversePair]:
    if not len(pair):
        return []
    reverse = (pair % n) * n + pair // n
    order = np.argsort(reverse)  # looked up in sorted order: cache-friendly, ~8x faster
    lo = np.searchsorted(pair, reverse[order], "left")
    count = np.searchsorted(pair, reverse[order], "right") - lo  # facts (t, *, h) of each
    fact = np.repeat(order, count)
    within = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    other = rel[np.repeat(lo, count) + within]
    mine = rel[fact]
    keep = mine < other  # each shared pair of facts once; r == other: symmetric, not a pair
    pair_key, shared = np.unique(mine[keep] * num_relations + other[keep], return_counts=True)
    size = np.bincount(rel, minlength=num_relations)
    out = []
    for k, s in zip(pair_key.tolist(), shared.tolist(), strict=True):
        a, b = divmod(k, num_relations)
        if min(size[a], size[b]) >= min_facts and s >= min_share * max(size[a], size[b]):
            out.append(InversePair(a, b, s, int(size[a]), int(size[b])))
    return sorted(out, key=lambda p: (-p.shared, p.r, p.r_inv))


def edge_removal_warning(
    mode: str, facts: Any, relation_names: list[str], min_covered: float = MIN_COVERED
) -> str | None:
    """One ``warning:`` line when ``mode`` (``train.remove_query_edges``) hides the inverse
    facts of explicit inverse relation pairs covering at least ``min_covered`` of the
    training ``facts`` (int [F, 3]); None otherwise (always for ``query`` and ``none``)."""
    if mode not in HIDING_MODES:
        return None
    distinct = _distinct_facts(facts, len(relation_names))
    pairs = _pairs(*distinct, MIN_SHARE, MIN_FACTS)
    sizes = {p.r: p.facts_r for p in pairs} | {p.r_inv: p.facts_inv for p in pairs}
    total, covered = len(distinct[0]), sum(sizes.values())
    if not pairs or covered < min_covered * total:
        return None
    first = pairs[0]
    example = f"{relation_names[first.r]} / {relation_names[first.r_inv]}"
    return (
        f"warning: train.remove_query_edges={mode} hides from training the inverse facts of "
        f"{len(pairs)} inverse relation pair(s) ({covered / total:.0%} of the training facts, "
        f"e.g. {example}); where the facts a model is tested on keep their inverse in the graph "
        "they are ranked on (NELL-995), train.remove_query_edges=query fits (docs/datasets.md)"
    )


def dataset_edge_removal_warning(mode: str, dataset: str | Path) -> str | None:
    """:func:`edge_removal_warning` on the training facts of the dataset folder ``dataset``
    (read only when ``mode`` hides more than the query fact)."""
    if mode not in HIDING_MODES:
        return None
    from cmpnn_dist.storage import open_dataset

    ds = open_dataset(dataset)
    return edge_removal_warning(mode, ds.graph_data("train").facts("train"), ds.relation_names)
