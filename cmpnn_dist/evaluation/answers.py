"""The true answers of every (node, relation) query, for filtering rankings and predictions."""

from __future__ import annotations

import torch
from torch import Tensor


class AnswerIndex:
    """All true answers of each (node, relation) key, as a sorted CSR; built in O(G log G).

    Args:
        triples: int64 [G, 3] facts (h, r, t) with r < |R|; both directions are indexed
            ((h, r) -> t and (t, r + |R|) -> h).
        num_relations: |R|.
    """

    def __init__(self, triples: Tensor, num_relations: int):
        triples = triples.long().reshape(-1, 3).cpu()
        h, r, t = triples[:, 0], triples[:, 1], triples[:, 2]
        self.r2 = 2 * num_relations
        keys = torch.cat([h * self.r2 + r, t * self.r2 + r + num_relations])
        answers = torch.cat([t, h])
        order = torch.argsort(keys, stable=True)
        self.keys, self.answers = keys[order], answers[order]

    def mask(self, heads: Tensor, rels: Tensor, num_nodes: int) -> Tensor:
        """bool [B, N]: True where (heads[b], rels[b], v) is a known fact."""
        q = heads.cpu().long() * self.r2 + rels.cpu().long()
        lo = torch.searchsorted(self.keys, q, right=False)
        hi = torch.searchsorted(self.keys, q, right=True)
        counts = hi - lo
        out = torch.zeros(q.numel(), num_nodes, dtype=torch.bool)
        total = int(counts.sum())
        if total:
            rows = torch.repeat_interleave(torch.arange(q.numel()), counts)
            starts = torch.repeat_interleave(lo, counts)
            offsets = torch.arange(total) - torch.repeat_interleave(
                counts.cumsum(0) - counts, counts
            )
            out[rows, self.answers[starts + offsets]] = True
        return out
