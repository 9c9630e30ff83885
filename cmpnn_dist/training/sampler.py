"""Sharded, stateful, deterministic sampler of training queries and strict negatives.

One *global batch* is ``B = global_batch_size`` training facts.  Epoch ``e`` draws, from a
private ``numpy.random.Generator`` seeded with ``(seed, e)``:

1. a permutation of the F training facts;
2. one coin per fact: with probability 1/2 the fact ``(h, r, t)`` becomes the head-prediction
   query ``(t, r + |R|, h)`` (head prediction is tail prediction with the inverse relation);
3. for each global batch in order, ``k`` strict negatives per query: tails ``v'`` drawn
   uniformly from the query relation's candidate pool and redrawn (vectorised rejection
   sampling) while ``(h, r, v')`` is a true fact of ``filter_triples`` (or of the training
   facts); queries whose true tails cover almost every candidate fall back to sampling from
   the explicit complement.

Candidate pools (``negatives``): ``uniform`` draws from all N nodes; ``typed`` (with node
types) draws from the nodes whose type is one of the types that relation r's tails have in
the training facts (for an inverse relation r + |R|: the types of r's heads), so a negative
never crosses types.  The relation -> type-set table is computed once, at construction; a
relation without training facts keeps the whole node set.  Without node types ``typed`` is
``uniform`` (one type), with the same random stream.

Every rank computes the *whole* global batch (queries and negatives, cheap: B x k integers)
and keeps the contiguous rows ``[rank * b, (rank + 1) * b)`` with ``b = B / world_size``.  So the
sequence of global batches depends only on ``seed`` (not on ``world_size``), and every rank
also sees the global batch's queries and negatives (``Batch.global_queries``,
``Batch.global_negatives``) to remove the same query edges as a one-worker run.  The last
incomplete global batch of an epoch is dropped (``F // B`` batches per epoch) so every worker
does the same amount of work.

The sampler never touches the global RNGs (``random``, ``numpy.random``, ``torch``).
Its state (epoch, position in the epoch, generator state) round-trips through
``state_dict`` / ``load_state_dict`` and continues exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cmpnn_dist.arrays import sorted_unique
from cmpnn_dist.config import Negatives, choices

STATE_VERSION = 1
_MAX_REJECTION_ROUNDS = 16
NEGATIVE_MODES: tuple[str, ...] = choices(Negatives)  # the config's Literal: the one list


@dataclass
class Batch:
    """One worker's share of a global batch.

    Attributes:
        queries: int64 [b, 3] ``(h, r, t)``, ``r`` in ``[0, 2|R|)``: predict ``t`` from ``(h, r)``.
        negatives: int64 [b, k] strict negative tails of each query.
        global_queries: int64 [B, 3] queries of the whole global batch (for query-edge removal).
        global_negatives: int64 [B, k] negatives of the whole global batch (for the
            ``candidates`` edge removal).
        epoch: epoch this batch belongs to.
        index: position of this global batch within its epoch (0-based).
    """

    queries: Tensor
    negatives: Tensor
    global_queries: Tensor
    global_negatives: Tensor
    epoch: int
    index: int


def _as_numpy(x: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64).reshape(-1, 3))


def _as_numpy_1d(x: Tensor | np.ndarray | None, n: int) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    out = np.ascontiguousarray(np.asarray(x, dtype=np.int64).reshape(-1))
    if len(out) != n or (n and out.min() < 0):
        raise ValueError(f"node_types must be {n} non-negative type ids, got shape {out.shape}")
    return out


class QuerySampler:
    """Deterministic sharded sampler of (query, negatives) batches; see the module docstring.

    Args:
        triples: int64 [F, 3] training facts ``(h, r, t)`` with ``r < num_relations``.
        num_nodes: N, negatives are drawn from ``[0, N)``.
        num_relations: |R| (without inverses).
        global_batch_size: B, queries per global batch (all workers together).
        num_negatives: k negatives per query.
        seed: sampler seed; the generator of epoch e is ``numpy.random.default_rng([seed, e])``.
        rank, world_size: this worker takes rows ``[rank*b, (rank+1)*b)``, ``b = B/world_size``.
        filter_triples: int64 [G, 3] facts that are never negatives (their inverses are
            excluded for head prediction); the training facts are always included.
        node_types: int64 [N] type id of every node, or None (untyped graph).
        negatives: ``"typed"`` (default; needs ``node_types``, else it is uniform) or
            ``"uniform"``; see the module docstring.
    """

    def __init__(
        self,
        triples: Tensor | np.ndarray,
        num_nodes: int,
        num_relations: int,
        global_batch_size: int,
        num_negatives: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        filter_triples: Tensor | np.ndarray | None = None,
        node_types: Tensor | np.ndarray | None = None,
        negatives: str = "typed",
    ) -> None:
        self._facts = _as_numpy(triples)
        if negatives not in NEGATIVE_MODES:
            raise ValueError(f"train.negatives={negatives!r}: choose one of {NEGATIVE_MODES}")
        self.negatives = "typed" if negatives == "typed" and node_types is not None else "uniform"
        self.num_nodes = int(num_nodes)
        self.num_relations = int(num_relations)
        self.global_batch_size = int(global_batch_size)
        self.num_negatives = int(num_negatives)
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        if self.global_batch_size < 1 or self.global_batch_size % self.world_size:
            raise ValueError(
                f"global batch size {global_batch_size} must be a positive multiple of "
                f"world_size {world_size}"
            )
        if len(self._facts) < self.global_batch_size:
            raise ValueError(
                f"{len(self._facts)} training facts are fewer than one global batch "
                f"({global_batch_size}); lower train.batch_size"
            )
        if self.num_negatives < 1:
            raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
        if self.seed < 0:
            raise ValueError(f"sampler seed must be >= 0, got {seed}")
        r2, n = 2 * self.num_relations, self.num_nodes
        if n * n * max(r2, 1) >= 2**62:
            raise ValueError(f"graph too large for int64 fact keys: {n} nodes x {r2} relations")
        self.local_batch_size = self.global_batch_size // self.world_size
        self._keys = self._build_filter_keys(filter_triples)
        self._pool_of: np.ndarray | None = None  # [2|R|] pool id of each relation
        if self.negatives == "typed":
            self._build_typed_pools(_as_numpy_1d(node_types, self.num_nodes))
        self.set_epoch(0)

    # ------------------------------------------------------------------ typed pools
    def _build_typed_pools(self, types: np.ndarray) -> None:
        """Per relation (both directions) the sorted nodes of its training tails' types.

        Relations with the same type set share one pool: ``_pool_of [2|R|]`` -> pool id,
        ``_pool_nodes`` the concatenated pools, ``_pool_start`` / ``_pool_size`` [P]."""
        f, R = self._facts, self.num_relations
        num_types = int(types.max()) + 1 if len(types) else 1
        seen = np.zeros((2 * R, num_types), dtype=bool)
        seen[f[:, 1], types[f[:, 2]]] = True
        seen[f[:, 1] + R, types[f[:, 0]]] = True
        seen[~seen.any(axis=1)] = True  # no training facts: every node is a candidate
        self.relation_tail_types = seen  # bool [2|R|, T], the table the pools come from
        sets, self._pool_of = np.unique(seen, axis=0, return_inverse=True)
        self._pool_of = self._pool_of.reshape(-1)
        pools = [np.flatnonzero(row[types]) for row in sets]
        self._pool_size = np.array([len(p) for p in pools], dtype=np.int64)
        self._pool_start = np.concatenate([[0], np.cumsum(self._pool_size)[:-1]]).astype(np.int64)
        self._pool_nodes = np.concatenate(pools).astype(np.int64)

    def candidates(self, r: int) -> np.ndarray:
        """int64: the nodes negatives of relation ``r`` (in ``[0, 2|R|)``) are drawn from."""
        if self._pool_of is None:
            return np.arange(self.num_nodes, dtype=np.int64)
        p = self._pool_of[r]
        return self._pool_nodes[self._pool_start[p] : self._pool_start[p] + self._pool_size[p]]

    def _draw(self, r: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform draws from each relation's pool; ``r`` broadcasts against ``shape``."""
        if self._pool_of is None:
            return self._rng.integers(0, self.num_nodes, size=shape, dtype=np.int64)
        p = np.broadcast_to(self._pool_of[r], shape)
        u = self._rng.integers(0, self._pool_size[p], size=shape, dtype=np.int64)
        return self._pool_nodes[self._pool_start[p] + u]

    # ------------------------------------------------------------------ filter
    def _key(self, h: np.ndarray, r: np.ndarray, t: np.ndarray) -> np.ndarray:
        return (h * (2 * self.num_relations) + r) * self.num_nodes + t

    def _build_filter_keys(self, filter_triples: Tensor | np.ndarray | None) -> np.ndarray:
        facts = self._facts
        if filter_triples is not None:
            facts = np.concatenate([facts, _as_numpy(filter_triples)])
        h, r, t = facts[:, 0], facts[:, 1], facts[:, 2]
        if len(facts) and (r.min() < 0 or r.max() >= self.num_relations):
            raise ValueError(f"relation ids must lie in [0, {self.num_relations})")
        if len(facts) and (min(h.min(), t.min()) < 0 or max(h.max(), t.max()) >= self.num_nodes):
            raise ValueError(f"entity ids must lie in [0, {self.num_nodes})")
        keys = np.concatenate([self._key(h, r, t), self._key(t, r + self.num_relations, h)])
        return sorted_unique(keys)

    def _is_true(self, keys: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self._keys, keys)
        pos = np.minimum(pos, len(self._keys) - 1)
        return self._keys[pos] == keys

    # ------------------------------------------------------------------ epochs
    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch (recomputes its permutation and coins)."""
        self._epoch = int(epoch)
        self._rng = np.random.default_rng([self.seed, self._epoch])
        self._perm = self._rng.permutation(len(self._facts))
        self._flip = self._rng.random(len(self._facts)) < 0.5
        self._pos = 0

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self._epoch

    @property
    def step(self) -> int:
        """Global batches already drawn in the current epoch."""
        return self._pos

    @property
    def steps_per_epoch(self) -> int:
        """``F // B``: the last incomplete global batch is dropped."""
        return len(self._facts) // self.global_batch_size

    def __len__(self) -> int:
        return self.steps_per_epoch

    @property
    def exhausted(self) -> bool:
        """True when every batch of the current epoch has been drawn."""
        return self._pos >= self.steps_per_epoch

    def __iter__(self) -> Iterator[Batch]:
        """Yield the remaining batches of the current epoch (does not start the next one)."""
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def next_batch(self) -> Batch | None:
        """This worker's share of the next global batch, or None at the end of the epoch."""
        if self.exhausted:
            return None
        B = self.global_batch_size
        idx = self._perm[self._pos * B : (self._pos + 1) * B]
        facts, flip = self._facts[idx], self._flip[idx]
        h = np.where(flip, facts[:, 2], facts[:, 0])
        r = np.where(flip, facts[:, 1] + self.num_relations, facts[:, 1])
        t = np.where(flip, facts[:, 0], facts[:, 2])
        queries = np.stack([h, r, t], axis=1)
        negatives = self._sample_negatives(h, r)
        index = self._pos
        self._pos += 1
        lo, hi = self.rank * self.local_batch_size, (self.rank + 1) * self.local_batch_size
        return Batch(
            queries=torch.from_numpy(queries[lo:hi].copy()),
            negatives=torch.from_numpy(negatives[lo:hi].copy()),
            global_queries=torch.from_numpy(queries),
            global_negatives=torch.from_numpy(negatives),
            epoch=self._epoch,
            index=index,
        )

    def _sample_negatives(self, h: np.ndarray, r: np.ndarray) -> np.ndarray:
        """int64 [B, k]: tails v' with (h, r, v') not a true fact, drawn from ``self._rng``."""
        rng, n, k = self._rng, self.num_nodes, self.num_negatives
        base = self._key(h, r, np.zeros_like(h))[:, None]  # [B, 1]
        neg = self._draw(r[:, None], (len(h), k))
        for _ in range(_MAX_REJECTION_ROUNDS):
            bad = self._is_true(base + neg)
            if not bad.any():
                return neg
            neg[bad] = self._draw(np.broadcast_to(r[:, None], neg.shape)[bad], (int(bad.sum()),))
        bad = self._is_true(base + neg)
        for row in np.flatnonzero(bad.any(axis=1)):  # rare: dense queries only
            lo = np.searchsorted(self._keys, base[row, 0])
            hi = np.searchsorted(self._keys, base[row, 0] + n)
            allowed = np.setdiff1d(self.candidates(int(r[row])), self._keys[lo:hi] - base[row, 0])
            if len(allowed) == 0:
                raise ValueError(
                    f"query (h={h[row]}, r={r[row]}) has every {self.negatives} candidate as a "
                    "true tail; no strict negative exists"
                )
            cols = np.flatnonzero(bad[row])
            neg[row, cols] = allowed[rng.integers(0, len(allowed), size=len(cols))]
        return neg

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Epoch, position and generator state (plain Python types, checkpoint-safe)."""
        return {
            "version": STATE_VERSION,
            "seed": self.seed,
            "num_facts": len(self._facts),
            "global_batch_size": self.global_batch_size,
            "num_negatives": self.num_negatives,
            "negatives": self.negatives,
            "epoch": self._epoch,
            "position": self._pos,
            "rng": self._rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; the next batch is exactly the one that was due."""
        for key, mine in (
            ("version", STATE_VERSION),
            ("seed", self.seed),
            ("num_facts", len(self._facts)),
            ("global_batch_size", self.global_batch_size),
            ("num_negatives", self.num_negatives),
            ("negatives", self.negatives),
        ):
            have = state.get(key, "uniform" if key == "negatives" else None)  # older states
            if have != mine:
                raise ValueError(f"sampler state has {key}={have!r} but this sampler has {mine!r}")
        self.set_epoch(int(state["epoch"]))
        self._pos = int(state["position"])
        self._rng.bit_generator.state = state["rng"]
