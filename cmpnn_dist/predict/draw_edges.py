"""The edges of the explanation picture: how each is bent and where its relation label goes.

Coordinates are inches (the picture's axes have one data unit per inch on both axes).  An
edge from node s to node d is matplotlib's ``arc3`` curve between the points where it leaves
the two node boxes, a quadratic Bezier

    B(t) = (1 - t)^2 P0 + 2 t (1 - t) C + t^2 P2,   C = (P0 + P2) / 2 + rad (y2 - y0, x0 - x2)

(``rad`` 0: a straight line; an edge is bent when it would run through another node's box or
along another edge between the same nodes).  Each relation label sits on its own edge, at the first
parameter of ``LABEL_TS`` (the middle first) where its box, with a margin for line widths and
arrow heads, meets no other edge, no node box and no label placed before it.  When a label
finds no such place, the caller spreads the layout (the same drawing, longer edges, labels of
the same size) and places them again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

LABEL_TS = (0.5, 0.45, 0.55, 0.4, 0.6, 0.35, 0.65, 0.3, 0.7, 0.25, 0.75, 0.2, 0.8, 0.15, 0.85)
MARGIN = 0.05  # inches kept between a label box and another edge (half an arrow head's width)
SAMPLES = 160  # points per edge curve for the checks
BENDS = (0.0, 0.3, -0.3, 0.55, -0.55, 0.8, -0.8, 1.05, -1.05)  # arc3 rad values, tried in order

Point = tuple[float, float]
Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def edge_bends(
    edges: list[tuple[int, int]], pos: dict[int, Point], boxes: dict[int, Point]
) -> list[float]:
    """``rad`` of each ``(src, dst)`` edge: the first of ``BENDS`` (straight first) that no
    earlier edge between the same two nodes uses (read in one direction: ``rad`` r from d to
    s is -r from s to d) and whose curve passes through no other node's box; without one,
    the first unused bend.  ``pos``, ``boxes``: node centres and box sizes (inches)."""
    used: dict[tuple[int, int], list[float]] = {}
    out = []
    for s, d in edges:
        pair, sign = ((s, d), 1.0) if s <= d else ((d, s), -1.0)
        taken = used.setdefault(pair, [])
        free = [r for r in BENDS if all(abs(sign * r - u) > 0.1 for u in taken)]
        others = [(pos[m], boxes[m]) for m in pos if m not in (s, d)]
        clear = [r for r in free if _clear(pos[s], boxes[s], pos[d], boxes[d], r, others)]
        rad = (clear or free)[0]
        taken.append(sign * rad)
        out.append(rad)
    return out


def _clear(
    a: Point, box_a: Point, b: Point, box_b: Point, rad: float, others: list[tuple[Point, Point]]
) -> bool:
    """Whether the edge from ``a`` to ``b`` bent by ``rad`` stays out of the ``others``
    (centre, box size) node boxes."""
    start, end = curve(a, box_a, b, box_b, rad)
    pts = bezier(start, end, rad, np.linspace(0.0, 1.0, SAMPLES))
    return not any(
        (np.abs(pts - np.asarray(c)) < np.asarray(wh) / 2 + 0.03).all(axis=1).any()
        for c, wh in others
    )


def _box_exit(center: Point, box: Point, toward: Point) -> Point:
    """Where the ray from a node's centre toward ``toward`` leaves its box (plus a gap)."""
    (cx, cy), (w, h) = center, box
    dx, dy = toward[0] - cx, toward[1] - cy
    if dx == 0 and dy == 0:
        return cx, cy
    half_w, half_h = w / 2 + 0.03, h / 2 + 0.03
    t = min(half_w / abs(dx) if dx else float("inf"), half_h / abs(dy) if dy else float("inf"))
    return cx + dx * t, cy + dy * t


def curve(a: Point, box_a: Point, b: Point, box_b: Point, rad: float) -> tuple[Point, Point]:
    """Start and end of the drawn edge from the node at ``a`` to the node at ``b``: where the
    line toward the curve's control point leaves each box."""
    cx, cy = (a[0] + b[0]) / 2 + rad * (b[1] - a[1]), (a[1] + b[1]) / 2 - rad * (b[0] - a[0])
    return _box_exit(a, box_a, (cx, cy)), _box_exit(b, box_b, (cx, cy))


def bezier(start: Point, end: Point, rad: float, t: Any) -> np.ndarray:
    """Points B(t) [len(t), 2] of the arc3 curve from ``start`` to ``end``."""
    p0, p2 = np.asarray(start, float), np.asarray(end, float)
    c = (p0 + p2) / 2 + rad * np.array([p2[1] - p0[1], p0[0] - p2[0]])
    t = np.asarray(t, float)[:, None]
    return (1 - t) ** 2 * p0 + 2 * t * (1 - t) * c + t**2 * p2


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(
    ends: list[tuple[Point, Point]],
    rads: list[float],
    sizes: list[Point],
    nodes: list[Box],
    fallback: bool,
) -> list[Point] | None:
    """The centre of each edge's label (``sizes``: its box, inches), in edge order: on its own
    curve, clear of every other curve, every node box and the labels before it.  None when a
    label has no such place, unless ``fallback`` (then it takes the curve's middle)."""
    ts = np.linspace(0.0, 1.0, SAMPLES)
    curves = [bezier(s, e, r, ts) for (s, e), r in zip(ends, rads, strict=True)]
    placed: list[Box] = []
    spots: list[Point] = []
    for i, ((s, e), r, (w, h)) in enumerate(zip(ends, rads, sizes, strict=True)):
        others = np.concatenate([c for j, c in enumerate(curves) if j != i] or [np.empty((0, 2))])
        spot = None
        for t in LABEL_TS:
            ((x, y),) = bezier(s, e, r, [t])
            box = (x - w / 2, y - h / 2, x + w / 2, y + h / 2)
            lo, hi = np.array(box[:2]) - MARGIN, np.array(box[2:]) + MARGIN
            if ((others > lo) & (others < hi)).all(axis=1).any():
                continue
            if any(_overlap(box, other) for other in [*nodes, *placed]):
                continue
            spot = (float(x), float(y))
            break
        if spot is None:
            if not fallback:
                return None
            ((x, y),) = bezier(s, e, r, [0.5])
            spot = (float(x), float(y))
        spots.append(spot)
        placed.append((spot[0] - w / 2, spot[1] - h / 2, spot[0] + w / 2, spot[1] + h / 2))
    return spots
