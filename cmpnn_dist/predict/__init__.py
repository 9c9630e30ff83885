"""Readable predictions: names in, ranked names out, and the paths that explain them.

``Predictor`` (top-k answers as a pandas DataFrame), ``explain_fact`` / ``Explanation``
(the most important head-to-tail paths by edge-weight gradients) and ``draw_explanation``
(the explanation subgraph as PNG / SVG).  Command line: ``python -m cmpnn_dist.predict``.
"""

from cmpnn_dist.lazy import exports

__all__ = ["Predictor", "Query"]  # imported on first use: torch loads after the CLI's defaults
__getattr__, __dir__ = exports(
    __name__, {"Predictor": "cmpnn_dist.predict.predictor", "Query": "cmpnn_dist.predict.names"}
)
