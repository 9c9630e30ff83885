"""sorted_unique equals np.unique on random and edge-case inputs."""

from __future__ import annotations

import numpy as np

from cmpnn_dist.arrays import sorted_unique


def test_sorted_unique_equals_np_unique():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 5, 1000):
        keys = rng.integers(-50, 50, n, dtype=np.int64)
        assert np.array_equal(sorted_unique(keys), np.unique(keys))
    big = rng.integers(0, 2**62, 10_000, dtype=np.int64)
    assert np.array_equal(sorted_unique(np.concatenate([big, big[::3]])), np.unique(big))
