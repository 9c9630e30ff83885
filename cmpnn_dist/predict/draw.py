"""The explanation subgraph as a picture (networkx + matplotlib, no display needed).

Nodes are the entities on the explanation's paths, laid out left to right by their position
on the best path that visits them (the query entity at the left, the answer at the right);
edges are the paths' facts, labelled with relation names and drawn in one colour per path
(the most important path first and thickest; a fact shared by several paths takes the
colour of the best one).  The title names the query, the answer and its logit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

PALETTE = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]


def _lane(i: int) -> int:
    """0, 1, -1, 2, -2, ...: the row of path i's new nodes."""
    return 0 if i == 0 else (i + 1) // 2 * (1 if i % 2 else -1)


def _layout(expl: Any) -> dict[int, tuple[float, float]]:
    """x: the hop index along the first (best) path through the node, scaled so that every
    path spans the query entity (x = 0) to the answer (x = longest path length); y: the best
    path on row 0, the new nodes of path i on row 1, -1, 2, -2, ... (moved further out when
    the spot is taken)."""
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


def draw_explanation(expl: Any, path: str | Path, dpi: int = 150) -> Path:
    """Write ``expl`` (:class:`~cmpnn_dist.predict.explain.Explanation`) to ``path``
    (.png, .svg or .pdf by its suffix); written to a temporary name, then renamed."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import networkx as nx

    path = Path(path)
    graph = nx.MultiDiGraph()
    names = expl.entity_names
    graph.add_node(expl.head)
    graph.add_node(expl.tail)
    edge_style: dict[tuple[int, int, int], tuple[int, str]] = {}
    for i, (_, edges) in enumerate(expl.paths):
        for s, rel, d in edges:
            if expl.num_relations <= rel:  # draw the fact in its stored direction
                s, d, rel = d, s, rel - expl.num_relations
            key = (s, rel, d)
            if key not in edge_style:
                edge_style[key] = (i, expl.relation_names[rel])
                graph.add_edge(s, d, key=rel)
    pos = _layout(expl)
    width = max(6.0, 2.6 * (max(x for x, _ in pos.values()) + 1))
    ys = [y for _, y in pos.values()]
    height = max(3.0, 1.3 * (max(ys) - min(ys) + 2))
    fig, ax = plt.subplots(figsize=(width, height))
    colors = [
        "#ffd54f" if n == expl.head else "#81c784" if n == expl.tail else "#e0e0e0"
        for n in graph.nodes
    ]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=colors, node_size=1600, edgecolors="k")
    nx.draw_networkx_labels(
        graph, pos, ax=ax, labels={n: names[n] for n in graph.nodes}, font_size=9
    )
    seen_pair: dict[tuple[int, int], int] = {}
    for (s, _rel, d), (i, label) in sorted(edge_style.items(), key=lambda kv: -kv[1][0]):
        pair = (min(s, d), max(s, d))
        bend = 0.15 * seen_pair.get(pair, 0)
        seen_pair[pair] = seen_pair.get(pair, 0) + 1
        color = PALETTE[i % len(PALETTE)]
        nx.draw_networkx_edges(
            graph,
            pos,
            ax=ax,
            edgelist=[(s, d)],
            edge_color=color,
            width=4.0 if i == 0 else 2.0,
            arrowsize=20,
            node_size=1600,
            connectionstyle=f"arc3,rad={bend}",
        )
        (x0, y0), (x1, y1) = pos[s], pos[d]
        ax.text(
            (x0 + x1) / 2,
            (y0 + y1) / 2 + 0.08 + bend / 2,
            label,
            color=color,
            fontsize=9,
            ha="center",
            va="bottom",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
    legend = [
        plt.Line2D([0], [0], color=PALETTE[i % len(PALETTE)], lw=4.0 if i == 0 else 2.0)
        for i in range(len(expl.paths))
    ]
    labels = [
        f"#{i + 1}  {imp:.3g}   {' / '.join(expl.relations_of(i))}"
        for i, (imp, _) in enumerate(expl.paths)
    ]
    if legend:
        ax.legend(legend, labels, title="path  importance  relations", loc="best", fontsize=8)
    query = f"({names[expl.head]}, {expl.relation_label(expl.relation)}, ?)"
    ax.set_title(f"{query} -> {names[expl.tail]}   logit {expl.score:.3f}", fontsize=11)
    ax.margins(0.15)
    ax.axis("off")
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
