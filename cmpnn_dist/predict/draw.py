"""The explanation subgraph as a picture (matplotlib, no display needed).

Layout (every size in inches, so the picture grows with its content instead of crowding it):

* nodes are the entities on the explanation's paths, in columns by their hop along the best
  path that visits them (the query entity at the left, the answer at the right) and in rows
  by path (the best path on row 0, path i's new nodes on rows 1, -1, 2, -2, ...);
* each node is its name in a rounded box, wrapped at ``WRAP`` characters on at most
  ``MAX_LINES`` lines; a longer name is cut with "..." and numbered, and the key under the
  graph gives it in full;
* column and row spacing come from the widest / tallest box plus the widest edge label, so
  boxes and labels never overlap; an edge that would cross a node in its row is bent;
* edges are the paths' facts, one colour per path (the best first and thickest; a fact shared
  by several paths takes the best one's colour), arrows clipped at the boxes, each labelled
  with its relation at the middle of the drawn curve;
* the legend (path, importance, relations) and the key are below the graph, outside it; the
  figure is cropped to its content (``bbox_inches="tight"`` with a small pad).

The title names the query, the answer and its logit.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from .draw_edges import bezier, curve, edge_bends, place_labels

PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
WRAP = 18  # characters per line of a node label
MAX_LINES = 3
FONT = 9  # points
CHAR_W = 0.0075 * FONT  # inches per character (DejaVu Sans, average)
LINE_H = 0.0185 * FONT  # inches per text line
BOX_PAD = 2 * 0.35 * FONT / 72 + 0.02  # a node box's padding around its text (inches)
SPREAD, SPREAD_TRIES = 1.35, 8  # layout growth per try when an edge label finds no free spot


def _lane(i: int) -> int:
    """0, 1, -1, 2, -2, ...: the row of path i's new nodes."""
    return 0 if i == 0 else (i + 1) // 2 * (1 if i % 2 else -1)


def _layout(expl: Any) -> dict[int, tuple[float, float]]:
    """``node -> (column, row)``: the column is the hop index along the first (best) path
    through the node, scaled so that every path spans the query entity (0) to the answer
    (the longest path's length); the row is the path's lane (moved further out when the spot
    is taken)."""
    longest = max((len(p) for _, p in expl.paths), default=1)
    pos: dict[int, tuple[float, float]] = {
        expl.head: (0.0, 0.0),
        expl.tail: (float(longest), 0.0),
    }
    taken = set(pos.values())
    for i, (_, edges) in enumerate(expl.paths):
        lane = _lane(i)
        for hop, (s, _, d) in enumerate(edges, start=1):
            for node in (s, d):
                if node in pos:
                    continue
                x = round(hop * longest / len(edges), 3) if node == d else 0.0
                y = float(lane)
                step = 1.0 if lane >= 0 else -1.0
                while (x, y) in taken:
                    y += step
                pos[node] = (x, y)
                taken.add((x, y))
    return pos


SEPARATORS = "/_-.:#"  # a name may also break after a run of these (``A::203``, URLs)


def _pieces(name: str) -> list[tuple[str, str]]:
    """``name`` as ``(glue, piece)`` pairs, split where a line may break: at whitespace (the
    glue is a space) and after a run of SEPARATORS (no glue); never inside a word."""
    out: list[tuple[str, str]] = []
    glue, cur = "", ""
    for i, ch in enumerate(name):
        if ch.isspace():
            if cur:
                out.append((glue, cur))
                glue, cur = " ", ""
            continue
        cur += ch
        if ch in SEPARATORS and i + 1 < len(name) and name[i + 1] not in SEPARATORS + " ":
            out.append((glue, cur))
            glue, cur = "", ""
    if cur:
        out.append((glue, cur))
    return out


def _fill(pieces: list[tuple[str, str]]) -> list[str]:
    """Greedy lines of at most WRAP characters (a piece longer than WRAP gets a line alone)."""
    lines: list[str] = []
    for glue, piece in pieces:
        if lines and len(lines[-1]) + len(glue) + len(piece) <= WRAP:
            lines[-1] += glue + piece
        else:
            lines.append(piece)
    return lines or [""]


def node_label(name: str, key: int) -> tuple[str, bool]:
    """``name`` on at most MAX_LINES lines of at most WRAP characters, broken only at spaces
    or after separators (never inside a word); a name that does not fit is cut, marked
    ``...`` and numbered ``[key]`` for the key under the graph (returns ``(label, cut)``)."""
    lines = _fill(_pieces(name))
    if len(lines) <= MAX_LINES and max(map(len, lines)) <= WRAP:
        return "\n".join(lines), False
    lines = _fill(_pieces(f"[{key}] {name}"))
    kept = []
    for line in lines:
        if len(kept) == MAX_LINES - 1 or len(line) > WRAP:
            kept.append(line[: WRAP - 3] + "...")  # the cut: the key has the whole name
            break
        kept.append(line)
    return "\n".join(kept), True


def _measure(labels: list[str], fontsize: float = FONT) -> list[tuple[float, float]]:
    """``(width, height)`` in inches of each label drawn in a node box (text + box padding),
    measured with matplotlib's renderer."""
    import matplotlib.pyplot as plt

    fig = plt.figure()
    try:
        renderer = fig.canvas.get_renderer()
        pad = 2 * 0.35 * fontsize / 72 + 0.02
        out = []
        for label in labels:
            ext = fig.text(0, 0, label, fontsize=fontsize).get_window_extent(renderer)
            out.append((ext.width / fig.dpi + pad, ext.height / fig.dpi + pad))
        return out
    finally:
        plt.close(fig)


def _facts(expl: Any) -> dict[tuple[int, int, int], tuple[int, str]]:
    """``(src, rel, dst)`` of each drawn fact (in its stored direction) -> (path, label)."""
    out: dict[tuple[int, int, int], tuple[int, str]] = {}
    for i, (_, edges) in enumerate(expl.paths):
        for s, rel, d in edges:
            if expl.num_relations <= rel:  # draw the fact in its stored direction
                s, d, rel = d, s, rel - expl.num_relations
            out.setdefault((s, rel, d), (i, expl.relation_names[rel]))
    return out


def render(expl: Any) -> tuple[Any, dict[str, Any]]:
    """The figure of ``expl`` and its parts, for checks: ``graph`` (the graph's axes), ``legend``
    (the axes under it: legend and key), ``nodes`` and ``edge_labels`` (text artists)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = expl.entity_names
    facts = _facts(expl)
    grid = _layout(expl)
    nodes = sorted(grid, key=lambda n: (grid[n][0], -grid[n][1]))
    labels, cut = {}, []
    for n in nodes:
        labels[n], was_cut = node_label(names[n], len(cut) + 1)
        if was_cut:
            cut.append(names[n])
    boxes = dict(zip(nodes, _measure([labels[n] for n in nodes]), strict=True))
    rels = sorted({lab for _, lab in facts.values()})
    measured = dict(zip(rels, _measure(rels), strict=True))
    rel_w = max((w + 0.3 for w, _ in measured.values()), default=0.5)
    col = max(w for w, _ in boxes.values()) + max(rel_w, 0.8) + 0.3
    row = max(h for _, h in boxes.values()) + 2 * LINE_H + 0.45
    drawn = sorted(facts.items(), key=lambda kv: -kv[1][0])  # the best path's facts on top
    # a label's box: its text and the 1-point pad of its white background (_measure adds a
    # node box's padding instead)
    sizes = [(w - BOX_PAD + 2 / 72, h - BOX_PAD + 2 / 72) for w, h in
             (measured[lab] for _, (_, lab) in drawn)]  # fmt: skip
    for attempt in range(SPREAD_TRIES):  # spread the layout until every label has a free spot
        scale = SPREAD**attempt
        pos = {n: (x * col * scale, y * row * scale) for n, (x, y) in grid.items()}
        rads = edge_bends([(s, d) for (s, _, d), _ in drawn], pos, boxes)
        ends = [curve(pos[s], boxes[s], pos[d], boxes[d], r)
                for ((s, _, d), _), r in zip(drawn, rads, strict=True)]  # fmt: skip
        node_boxes = [(pos[n][0] - boxes[n][0] / 2, pos[n][1] - boxes[n][1] / 2,
                       pos[n][0] + boxes[n][0] / 2, pos[n][1] + boxes[n][1] / 2)
                      for n in nodes]  # fmt: skip
        spots = place_labels(ends, rads, sizes, node_boxes, attempt == SPREAD_TRIES - 1)
        if spots is not None:
            break
    assert spots is not None

    xs = [pos[n][0] + s * boxes[n][0] / 2 for n in nodes for s in (-1, 1)]
    ys = [pos[n][1] + s * boxes[n][1] / 2 for n in nodes for s in (-1, 1)]
    for (x, y), (w, h) in zip(spots, sizes, strict=True):
        xs += [x - w / 2, x + w / 2]
        ys += [y - h / 2, y + h / 2]
    for (a, b), r in zip(ends, rads, strict=True):
        pts = bezier(a, b, r, [i / 16 for i in range(17)])
        xs += list(pts[:, 0])
        ys += list(pts[:, 1])
    pad = 0.15 + LINE_H
    x0, x1, y0, y1 = min(xs) - pad, max(xs) + pad, min(ys) - pad, max(ys) + pad
    width, height = x1 - x0, y1 - y0

    legend_lines = [
        (PALETTE[i % len(PALETTE)], 3.0 if i == 0 else 1.6,
         f"#{i + 1}  {imp:.3g}   {' / '.join(expl.relations_of(i))}")
        for i, (imp, _) in enumerate(expl.paths)
    ]  # fmt: skip
    key_lines = [f"[{k}] {name}" for k, name in enumerate(cut, start=1)]
    texts_below = ["path  importance  relations"] + [t for *_, t in legend_lines]
    texts_below += (["key:"] + key_lines) if key_lines else []
    line = LINE_H * 8 / FONT * 1.25
    below = len(texts_below) * line + 0.15
    widest = max((len(t) for t in texts_below), default=0) * CHAR_W * 8 / FONT + 0.7
    fig_w = max(width, widest, 3.0)
    title_h = 0.45
    fig_h = height + below + title_h
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes(((fig_w - width) / 2 / fig_w, below / fig_h, width / fig_w,
                       height / fig_h))  # fmt: skip
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.axis("off")

    texts = {}
    for n in nodes:
        color = "#ffd54f" if n == expl.head else "#81c784" if n == expl.tail else "#eeeeee"
        texts[n] = ax.text(
            *pos[n], labels[n], ha="center", va="center", fontsize=FONT, zorder=3,
            bbox={"boxstyle": "round,pad=0.35", "facecolor": color, "edgecolor": "black"},
        )  # fmt: skip
    edge_labels, edges = [], []
    for (_, (i, label)), r, (start, end), spot in zip(drawn, rads, ends, spots, strict=True):
        color = PALETTE[i % len(PALETTE)]
        edges.append(ax.annotate(
            "", xy=end, xytext=start, zorder=2,
            arrowprops={
                "arrowstyle": "-|>", "color": color, "lw": 3.0 if i == 0 else 1.6,
                "mutation_scale": 16, "connectionstyle": f"arc3,rad={r}",
                "shrinkA": 0, "shrinkB": 0,
            },
        ))  # fmt: skip
        edge_labels.append(ax.text(
            *spot, label, color=color, fontsize=FONT, ha="center", va="center", zorder=4,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9, "pad": 1},
        ))  # fmt: skip

    lax = fig.add_axes((0.0, 0.0, 1.0, below / fig_h))
    lax.set_xlim(0, fig_w)
    lax.set_ylim(0, below)
    lax.axis("off")
    y = below - line / 2
    lax.text(0.1, y, texts_below[0], fontsize=8, va="center", ha="left")
    for color, lw, text in legend_lines:
        y -= line
        lax.plot([0.1, 0.5], [y, y], color=color, lw=lw)
        lax.text(0.6, y, text, fontsize=8, va="center", ha="left")
    for text in (["key:"] + key_lines) if key_lines else []:
        y -= line
        lax.text(0.1, y, text, fontsize=8, va="center", ha="left")
    query = f"({names[expl.head]}, {expl.relation_label(expl.relation)}, ?)"
    title = f"{query} -> {names[expl.tail]}   logit {expl.score:.3f}"
    wrapped = textwrap.wrap(title, max(40, int(fig_w / (CHAR_W * 10 / FONT))))
    fig.text(0.5, 1.0 - 0.08 / fig_h, "\n".join(wrapped), fontsize=10, ha="center", va="top")
    parts = {"graph": ax, "legend": lax, "nodes": list(texts.values()), "edge_labels": edge_labels,
             "edges": edges}  # fmt: skip
    return fig, parts


def draw_explanation(expl: Any, path: str | Path, dpi: int = 150) -> Path:
    """Write ``expl`` (:class:`~cmpnn_dist.predict.explain.Explanation`) to ``path``
    (.png, .svg or .pdf by its suffix); written to a temporary name, then renamed."""
    import matplotlib
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, _ = render(expl)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", pad_inches=0.1)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
