"""The explanation picture is readable: the example of docs/predict.md (its path table, drawn)
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
# the explanation of (A::203, t0, C::21) in docs/predict.md's style: three paths
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


NAMES_TO_WRAP = [
    "A::203", "/m/0qmfz", "Gene::1234", "Compound::DB00014", "Anatomy::UBERON:0000002",
    "Side Effect::C0000737", "http://www.wikidata.org/entity/Q42",
    "a very long entity name with many words in it for wrapping",
    "Pneumonoultramicroscopicsilicovolcanoconiosis", "x" * 18, "x" * 19,
    "http://example.org/entity/A::203/".ljust(60, "z"),
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES_TO_WRAP)
def test_node_names_never_break_inside_a_word(name):
    """Each line break of a node label falls at a space or after a separator, never between
    two letters or digits; a label that cannot show the whole name that way is cut (``...``,
    numbered) and the cut name is a prefix of the name."""
    from cmpnn_dist.predict.draw import SEPARATORS, node_label

    label, cut = node_label(name, 7)
    lines = label.split("\n")
    assert len(lines) <= MAX_LINES and max(map(len, lines)) <= WRAP
    if cut:
        assert lines[0].startswith("[7]") and lines[-1].endswith("...")
        text = " ".join(lines)[len("[7]") :].strip()
        lines = [lines[0][len("[7]") :].strip(), *lines[1:]]
        lines[-1] = lines[-1][:-3]
        lines = [line for line in lines if line]
    pos = 0
    for i, line in enumerate(lines):
        while name[pos].isspace():
            pos += 1
        assert name.startswith(line, pos), (name, lines)
        pos += len(line)
        if i < len(lines) - 1:  # a break: whitespace next, or a separator just before
            assert name[pos].isspace() or name[pos - 1] in SEPARATORS, (name, lines, pos)
    if not cut:
        assert pos == len(name)  # the whole name, in order
    else:
        assert text and name.replace(" ", "").startswith(text.replace(" ", "")[:-3])


def _random_explanation(seed: int) -> Explanation:
    """2-6 simple paths of 1-4 hops from entity 0 to entity 1 through 10 others, random
    relations in either direction: layouts with shared nodes, crossings and parallel facts."""
    import random

    rnd = random.Random(seed)
    names = [f"E{i}" for i in range(12)]
    paths = []
    for p in range(rnd.randint(2, 6)):
        hops = rnd.randint(1, 4)
        nodes = [0, *rnd.sample(range(2, 12), hops - 1), 1]
        paths.append(
            (
                1.0 / (p + 1),
                [(a, rnd.randrange(2 * R), b) for a, b in zip(nodes, nodes[1:], strict=False)],
            )
        )
    return Explanation(
        0, 0, 1, 1.0, paths, names, RELATIONS, [list(range(len(e))) for _, e in paths]
    )


EXPLANATIONS = [README, LONG] + [_random_explanation(seed) for seed in range(16)]


@pytest.mark.parametrize(
    "expl", EXPLANATIONS, ids=["readme", "60-char-names", *map(str, range(16))]
)
def test_no_edge_runs_through_another_label(expl):
    """No drawn edge (matplotlib's own path of the arrow, shaft and head, in pixels) enters the
    white box of another edge's relation label or a node box it does not end at."""
    import matplotlib.pyplot as plt

    fig, parts = render(expl)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        labels = [t.get_bbox_patch().get_window_extent(r) for t in parts["edge_labels"]]
        for i, ann in enumerate(parts["edges"]):
            patch = ann.arrow_patch
            path = patch.get_transform().transform_path(patch.get_path())
            pts = []
            for poly in path.to_polygons(closed_only=False):
                for a, b in zip(poly[:-1], poly[1:], strict=True):
                    t = np.linspace(0, 1, int(np.hypot(*(b - a))) + 2)[:, None]
                    pts.append(a + t * (b - a))
            pts = np.concatenate(pts)
            for j, box in enumerate(labels):
                if j == i:
                    continue
                inside = ((pts > [box.x0, box.y0]) & (pts < [box.x1, box.y1])).all(axis=1)
                assert not inside.any(), (i, parts["edge_labels"][j].get_text())
            for node in parts["nodes"]:
                box = node.get_bbox_patch().get_window_extent(r)
                inside = (pts > [box.x0 + 2, box.y0 + 2]) & (pts < [box.x1 - 2, box.y1 - 2])
                assert not inside.all(axis=1).any(), (i, node.get_text())
        for i, a in enumerate(labels):  # and no two labels overlap
            assert not any(_overlap(a, b) for b in labels[i + 1 :])
    finally:
        plt.close(fig)
