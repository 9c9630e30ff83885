"""PNA (Corso et al., 2020): four statistics and three degree scalers (width 12).

S_v   = [mean, max, min, std] (4d),  std = sqrt(relu(E[m^2] - E[m]^2) + 1e-6)
AGG_v = [S_v,  S_v * s_v,  S_v / max(s_v, 1e-2)]                       (12d)
s_v   = log(deg(v) + 1) / delta,  delta = mean_{w in V} log(deg(w) + 1)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from cmpnn_dist.model.aggregations.base import Aggregation, register
from cmpnn_dist.ops import ordered


@register
class PNA(Aggregation):
    name, reductions, width = "pna", ("sum", "sumsq", "max", "min"), 12
    formula = "[S, S s, S / max(s, 1e-2)], S = [mean, max, min, std], s = log-degree scaler"
    graph_degrees = True  # delta

    def forward(self, raw: dict[str, Tensor]) -> Tensor:
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
        delta = raw["log_degree_mean"] if "log_degree_mean" in raw else ordered.mean(log_deg)
        scale = (log_deg / delta.clamp(min=1e-6)).view(-1, 1, 1)
        return stats, scale

    def combine(self, linear: nn.Linear, h_hist: Tensor, raw: dict[str, Tensor]) -> Tensor:
        """W_0 [h || AGG] + bias without building the 12d AGG: with W_0 = [W_h, W_1, W_2, W_3]
        it equals W_h h + W_1 S + s (W_2 S) + (W_3 S) / s' (one matmul of S against
        [W_1; W_2; W_3]), the same function and parameters at a third of the memory traffic."""
        dim = h_hist.shape[-1]
        stats, scale = self.pna_parts(raw)
        weight = linear.weight  # [d, 13 d]
        w_stats = weight[:, dim:].reshape(dim, 3, 4 * dim).transpose(0, 1).reshape(3 * dim, -1)
        y = ordered.linear(stats, w_stats)  # [N, B, 3d]: W_1 S, W_2 S, W_3 S
        out = ordered.linear(h_hist, weight[:, :dim], linear.bias) + y[..., :dim]
        return out + scale * y[..., dim : 2 * dim] + y[..., 2 * dim :] / scale.clamp(min=1e-2)
