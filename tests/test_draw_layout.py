"""The explanation picture is readable: the README's example (its explanation table, drawn)
and the same with 60-character names and long relation names.

Checked on the rendered figure (matplotlib's own extents, in pixels) and on the PNG:
no two node boxes overlap, no edge label covers a node, every node and edge label lies inside
the graph's axes and the legend / key lie outside it, node labels are wrapped (at most 3
lines of at most 18 characters) with cut names given in full in the key, and the PNG's blank
margin is at most 10 % of its width and height on every side.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cmpnn_dist.predict.draw import MAX_LINES, WRAP, draw_explanation, render
from cmpnn_dist.predict.explain import Explanation

NAMES = ["A::203", "B::94", "C::21", "C::241", "A::149"]
RELATIONS = ["t0", "t1", "b0", "b1", "b2"]
R = len(RELATIONS)
# the README's explanation of (A::203, t0, C::21): three paths
README = Explanation(
    0, 0, 2, 3.359138,
    [
        (0.103328, [(0, 2, 1), (1, 3, 2)]),
        (0.068598, [(0, 0, 3), (3, R + 3, 1), (1, 3, 2)]),
        (0.068598, [(0, R + 4, 4), (4, 1, 1), (1, 3, 2)]),
    ],
    NAMES, RELATIONS, [[1, 2], [0, 1, 2], [0, 1, 2]],
)  # fmt: skip
LONG = dataclasses.replace(
    README,
    entity_names=[f"http://example.org/entity/{n}/".ljust(60, "z") for n in NAMES],
    relation_names=[f"relation_{r}_with_a_long_name" for r in RELATIONS],
)


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _inside(a, b) -> bool:
    return a.x0 >= b.x0 - 1 and a.x1 <= b.x1 + 1 and a.y0 >= b.y0 - 1 and a.y1 <= b.y1 + 1


@pytest.mark.parametrize("expl", [README, LONG], ids=["readme", "60-char-names"])
def test_the_picture_layout(expl, tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.image import imread

    fig, parts = render(expl)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        graph = parts["graph"].get_window_extent(r)
        legend = parts["legend"].get_window_extent(r)
        nodes = [t.get_bbox_patch().get_window_extent(r) for t in parts["nodes"]]
        labels = [t.get_window_extent(r) for t in parts["edge_labels"]]
        assert len(nodes) == 5 and len(labels) == 6  # B::94 -b1-> C::21 is shared
        assert not _overlap(graph, legend)  # the legend is outside the graph
        for i, a in enumerate(nodes):
            assert _inside(a, graph)
            assert not any(_overlap(a, b) for b in nodes[i + 1 :])
            assert not any(_overlap(a, lab) for lab in labels)
        for lab in labels:
            assert _inside(lab, graph)
        for t in parts["nodes"]:
            lines = t.get_text().split("\n")
            assert len(lines) <= MAX_LINES and max(map(len, lines)) <= WRAP
        key = " ".join(t.get_text() for t in parts["legend"].texts)
        if expl is LONG:
            for name in expl.entity_names:  # every cut name is in the key, in full
                assert name in key
        else:  # short names: drawn whole, no key
            assert "key:" not in key
            assert {t.get_text() for t in parts["nodes"]} == set(NAMES)
    finally:
        plt.close(fig)

    png = draw_explanation(expl, tmp_path / "x.png")
    img = imread(png)[..., :3]
    ink = (img < 0.95).any(axis=2)
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    h, w = ink.shape
    margins = [rows[0] / h, 1 - (rows[-1] + 1) / h, cols[0] / w, 1 - (cols[-1] + 1) / w]
    assert max(margins) <= 0.10, margins
    # no band of blank rows / columns wider than a third of the picture inside it either
    for line in (ink.any(axis=1), ink.any(axis=0)):
        gaps = np.diff(np.flatnonzero(line))
        assert gaps.max() < len(line) / 3
