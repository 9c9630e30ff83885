"""Readable predictions: names in, ranked names out, and the paths that explain them.

``Predictor`` (top-k answers as a pandas DataFrame), ``explain_fact`` / ``Explanation``
(the most important head-to-tail paths by edge-weight gradients) and ``draw_explanation``
(the explanation subgraph as PNG / SVG).  Command line: ``python -m cmpnn_dist.predict``.
"""

from cmpnn_dist.predict.names import Query
from cmpnn_dist.predict.predictor import Predictor

__all__ = ["Predictor", "Query"]
