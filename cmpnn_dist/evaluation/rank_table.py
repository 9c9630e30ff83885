"""Per-query ranks of one evaluation, and their Parquet file.

One row per ranking: the fact ``(head, relation, tail)`` as stored in the split (relation
< |R|), ``direction`` (``tail``: predict the tail from (head, relation); ``head``: predict the
head, i.e. tail prediction with the inverse relation), ``rank`` (float64; whole numbers with
pessimistic ties, halves possible with average ties) and ``candidates`` (the negatives it was
ranked against: non-filtered entities, of the target's type for ``typed``, K for ``ogb``).
The file's schema metadata names the protocol and the tie rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor


@dataclass
class RankTable:
    """Column tensors [Q] of the rankings; see the module docstring."""

    heads: Tensor
    relations: Tensor
    tails: Tensor
    head_direction: Tensor  # bool: True = head prediction
    rank: Tensor
    candidates: Tensor
    protocol: str
    ties: str
    seconds: float = 0.0
    # protocol ogb: ogb Evaluator's per-query "mrr", "hits@1", "hits@3", "hits@10" (float32)
    ogb_lists: dict[str, Tensor] = field(default_factory=dict)

    def write_parquet(self, path: str | Path) -> Path:
        """Write the table to ``path`` (encoded in memory, then a temp name and a rename:
        never half-written; no space left is one error naming ``path``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from cmpnn_dist.storage.atomic import write_atomic

        path = Path(path)
        direction = pa.DictionaryArray.from_arrays(
            pa.array(self.head_direction.to(torch.int8).numpy()), pa.array(["tail", "head"])
        )
        table = pa.table(
            {
                "head": pa.array(self.heads.numpy()),
                "relation": pa.array(self.relations.numpy()),
                "tail": pa.array(self.tails.numpy()),
                "direction": direction,
                "rank": pa.array(self.rank.double().numpy()),
                "candidates": pa.array(self.candidates.long().numpy()),
            },
            metadata={"protocol": self.protocol, "ties": self.ties},
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        return write_atomic(path, sink.getvalue().to_pybytes())
