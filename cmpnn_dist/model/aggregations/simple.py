"""The one-statistic aggregations: sum, mean and max (width 1, output [N, B, d]).

sum:   AGG_v = sum M_v
mean:  AGG_v = sum M_v / max(deg(v), 1)
max:   AGG_v = max M_v (elementwise; 0 when M_v is empty)
"""

from __future__ import annotations

from torch import Tensor

from cmpnn_dist.model.aggregations.base import Aggregation, register


@register
class Sum(Aggregation):
    name, reductions, formula = "sum", ("sum",), "sum M_v"

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
        return raw["sum"]


@register
class Mean(Aggregation):
    name, reductions, formula = "mean", ("sum",), "sum M_v / max(deg(v), 1)"

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
        return raw["sum"] / raw["degree"].clamp(min=1).view(-1, 1, 1)


@register
class Max(Aggregation):
    name, reductions, formula = "max", ("max",), "max M_v (0 when empty)"

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
        return raw["max"]
