"""AGG: aggregation of the incoming messages of a node (paper section 4.1, appendix E).

With M_v the multiset of messages into v (kept edges only) and deg(v) = |M_v|:

    sum:   AGG_v = sum M_v
    mean:  AGG_v = sum M_v / max(deg(v), 1)
    max:   AGG_v = max M_v (elementwise; 0 when M_v is empty)
    pna:   (Corso et al., 2020) statistics  S_v = [mean, max, min, std] (4d), with
           std = sqrt(relu(E[m^2] - E[m]^2) + 1e-6), then three degree scalers
           AGG_v = [S_v,  S_v * s_v,  S_v / max(s_v, 1e-2)]   (12d),
           s_v = log(deg(v) + 1) / delta,  delta = mean_{w in V} log(deg(w) + 1).

Output widths: d for sum / mean / max, 12 d for pna; the layer's W_0 maps them back to d.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.config import Aggregate, choices

AGGREGATE_KINDS = choices(Aggregate)  # the one list: cmpnn_dist.config
_NEEDS = {
    "sum": ("sum",),
    "mean": ("sum",),
    "max": ("max",),
    "pna": ("sum", "sumsq", "max", "min"),
}


class Aggregation(nn.Module):
    """Parameter-free aggregation built from the raw reductions of ``propagate``."""

    def __init__(self, kind: str):
        super().__init__()
        if kind not in AGGREGATE_KINDS:
            raise ValueError(f"unknown model.aggregate {kind!r}; choices: {AGGREGATE_KINDS}")
        self.kind = kind

    @property
    def ops_aggregators(self) -> tuple[str, ...]:
        """The raw reductions this aggregation needs from ``propagate``."""
        return _NEEDS[self.kind]

    def out_dim(self, dim: int) -> int:
        return 12 * dim if self.kind == "pna" else dim

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
        """Args: raw: ``propagate`` output (each [N, B, d]; ``degree`` [N]).
        Returns: float [N, B, d] (sum / mean / max) or [N, B, 12 d] (pna)."""
        if self.kind == "sum":
            return raw["sum"]
        if self.kind == "max":
            return raw["max"]
        if self.kind == "mean":
            return raw["sum"] / raw["degree"].clamp(min=1).view(-1, 1, 1)
        stats, scale = self.pna_parts(raw)
        return torch.cat([stats, stats * scale, stats / scale.clamp(min=1e-2)], dim=-1)

    @staticmethod
    def pna_parts(raw: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """PNA statistics S = [mean, max, min, std] float [N, B, 4d] and the log-degree
        scaler s float [N, 1, 1]; AGG = [S, S s, S / max(s, 1e-2)].  An optional
        ``raw["log_degree_mean"]`` (a scalar tensor) replaces delta."""
        deg = raw["degree"]
        count = deg.clamp(min=1).view(-1, 1, 1)
        mean = raw["sum"] / count
        std = torch.sqrt(torch.relu(raw["sumsq"] / count - mean * mean) + 1e-6)
        stats = torch.cat([mean, raw["max"], raw["min"], std], dim=-1)
        log_deg = torch.log(deg + 1)
        # delta: over the nodes of ``raw``, or given (pruned propagation: the full graph's)
        delta = raw["log_degree_mean"] if "log_degree_mean" in raw else log_deg.mean()
        scale = (log_deg / delta.clamp(min=1e-6)).view(-1, 1, 1)
        return stats, scale
