"""The paper's relational Weisfeiler-Leman tests as a tool (sections 5.1 and 5.3, appendix A).

``run_test(kg, "rawl2", rounds)`` gives the (stable, when ``rounds`` is None) colouring;
``distinguishes(kg, (u, v), (u2, v2), test="rawl2")`` asks whether a test tells two pairs
apart; ``python -m cmpnn_dist.wl GRAPH.tsv --pair a,b --pair c,d --test rawl2`` is the CLI.
C-MPNNs are bounded by rawl_2 (on the graph they pass messages over: with the product's inverse
edges that is rawl_2^+), R-MPNNs by rwl_1.  See docs/wl.md.
"""

from cmpnn_dist.wl.graph import KG, read_kg
from cmpnn_dist.wl.refine import ETAS, TESTS, Colouring, distinguishes, run_test

__all__ = ["ETAS", "KG", "TESTS", "Colouring", "distinguishes", "read_kg", "run_test"]
