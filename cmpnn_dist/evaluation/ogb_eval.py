"""OGB's own metric code for the ``ogb`` protocol (``ogb.linkproppred.Evaluator``).

``Evaluator(name="ogbl-biokg").eval({"y_pred_pos": [Q], "y_pred_neg": [Q, K]})`` returns
per-query float32 lists ``mrr_list``, ``hits@{1,3,10}_list``; its rank is
``1 + (#neg > pos + #neg >= pos) / 2`` (average ties).  The leaderboard number is the mean
of each list.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from torch import Tensor

OGB_NAME = "ogbl-biokg"


@lru_cache(maxsize=1)
def _evaluator() -> Any:
    from ogb.linkproppred import Evaluator

    return Evaluator(name=OGB_NAME)


def ogb_lists(pos: Tensor, neg: Tensor) -> list[Tensor]:
    """``[mrr, hits@1, hits@3, hits@10]`` per query (float32 [Q] each, on ``pos``'s device)
    from ogb's Evaluator; ``pos`` [Q] target scores, ``neg`` [Q, K] negative scores."""
    out = _evaluator().eval({"y_pred_pos": pos.float(), "y_pred_neg": neg.float()})
    return [out[f"{k}_list"] for k in ("mrr", "hits@1", "hits@3", "hits@10")]
