"""The reductions ``ops.propagate`` computes over a node's incoming messages: the one list.

For node v with incoming messages m_e [B, d] (e in E_v, after masking and weighting):

    sum   = sum_e m_e          sumsq = sum_e m_e * m_e
    max   = max_e m_e          min   = min_e m_e        (0 for nodes without in-edges)

Every impl (``naive``, ``reference``, ``generic``, ``fused``, ``scatter``) and the dispatcher's
argument check read :data:`AGGREGATORS`; the model's aggregations (``model.aggregate``) are
built from these (``mean`` = sum / degree, PNA's std from sum and sumsq).
"""

from __future__ import annotations

from typing import Literal, get_args

Reduction = Literal["sum", "sumsq", "max", "min"]
AGGREGATORS: tuple[str, ...] = get_args(Reduction)

__all__ = ["AGGREGATORS", "Reduction"]
