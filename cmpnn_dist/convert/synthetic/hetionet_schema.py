"""A synthetic graph with Hetionet v1.0's schema and size (``synthetic:hetionet_schema``).

Hetionet's edges are not available offline; its node table and per-metaedge statistics are.
This generator keeps what is known and draws the rest:

- nodes: the real node table (``raw_path``/``hetionet-v1.0-nodes.tsv``: 47,031 ids, names,
  11 kinds) when given, else ``Kind::<i>`` ids with the real per-kind counts;
- the 24 metaedges (:data:`METAEDGES`, from hetio's ``metaedges.tsv``): for each, exactly its
  edge count (2,250,197 in all) between exactly its number of distinct source and target nodes
  of the right kinds;
- degree skew: every node has one popularity score per kind (standard normal) plus per-metaedge
  noise; a metaedge's sources are the ``source_nodes`` highest-scoring nodes of the source
  kind, each in a Zipf law ``P(rank k) ~ (k + 1) ** -alpha`` (targets likewise), so hubs are
  shared across metaedges.  Every chosen source and target gets at least one edge (a cyclic
  pairing), the remaining edges are drawn from the two Zipf laws without repeats or self loops.

The split is the one ``convert hetionet`` makes from the upstream files (PyKEEN's coverage
split, :func:`cmpnn_dist.convert.hetionet.pykeen_dataset`): at ``scale=1`` the sizes are the
paper's 1,800,157 / 225,020 / 225,020.  ``scale`` multiplies the edge counts and
``sqrt(scale)`` the node counts (so each metaedge keeps its density); tests use 0.001.
:func:`write_upstream` writes the graph as hetio's two files, for the converter.
"""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cmpnn_dist.convert.coverage_split import relation_order
from cmpnn_dist.convert.synthetic.params import merge_params
from cmpnn_dist.storage.errors import StorageError

# (abbreviation, source kind, target kind, edges, distinct sources, distinct targets)
METAEDGES = [
    ("AdG", "Anatomy", "Gene", 102_240, 36, 15_097),
    ("AeG", "Anatomy", "Gene", 526_407, 241, 18_094),
    ("AuG", "Anatomy", "Gene", 97_848, 36, 15_929),
    ("CbG", "Compound", "Gene", 11_571, 1_389, 1_689),
    ("CcSE", "Compound", "Side Effect", 138_944, 1_071, 5_701),
    ("CdG", "Compound", "Gene", 21_102, 734, 2_880),
    ("CpD", "Compound", "Disease", 390, 221, 50),
    ("CrC", "Compound", "Compound", 6_486, 1_042, 1_054),
    ("CtD", "Compound", "Disease", 755, 387, 77),
    ("CuG", "Compound", "Gene", 18_756, 703, 3_247),
    ("DaG", "Disease", "Gene", 12_623, 134, 5_392),
    ("DdG", "Disease", "Gene", 7_623, 44, 5_745),
    ("DlA", "Disease", "Anatomy", 3_602, 133, 398),
    ("DpS", "Disease", "Symptom", 3_357, 133, 415),
    ("DrD", "Disease", "Disease", 543, 112, 106),
    ("DuG", "Disease", "Gene", 7_731, 44, 5_630),
    ("GcG", "Gene", "Gene", 61_690, 9_043, 9_532),
    ("GiG", "Gene", "Gene", 147_164, 9_526, 14_084),
    ("GpBP", "Gene", "Biological Process", 559_504, 14_772, 11_381),
    ("GpCC", "Gene", "Cellular Component", 73_566, 10_580, 1_391),
    ("GpMF", "Gene", "Molecular Function", 97_222, 13_063, 2_884),
    ("GpPW", "Gene", "Pathway", 84_372, 8_979, 1_822),
    ("Gr>G", "Gene", "Gene", 265_672, 4_634, 7_048),
    ("PCiC", "Pharmacologic Class", "Compound", 1_029, 345, 724),
]
KIND_SIZES = {
    "Anatomy": 402,
    "Biological Process": 11_381,
    "Cellular Component": 1_391,
    "Compound": 1_552,
    "Disease": 137,
    "Gene": 20_945,
    "Molecular Function": 2_884,
    "Pathway": 1_822,
    "Pharmacologic Class": 345,
    "Side Effect": 5_734,
    "Symptom": 438,
}
DEFAULTS = {"scale": 1.0, "alpha": 0.8, "noise": 1.0, "seed": 0}
NODES_FILE = "hetionet-v1.0-nodes.tsv"


def node_table(raw_path: str | Path | None) -> pa.Table:
    """(id, name, kind) string table: the real one from ``raw_path`` or a generated one."""
    if raw_path is not None:
        from cmpnn_dist.convert.hetionet import NODE_COLUMNS, read_headed_tsv

        path = Path(raw_path).expanduser() / NODES_FILE
        table = read_headed_tsv(path, NODE_COLUMNS, optional=(1,))
        known = set(pc.unique(table.column("kind")).to_pylist())
        if known != set(KIND_SIZES):
            raise StorageError(f"node kinds {sorted(known)} are not Hetionet's 11", path)
        return table
    ids, names, kinds = [], [], []
    for kind, size in KIND_SIZES.items():
        ids += [f"{kind}::{i}" for i in range(size)]
        names += [f"{kind} {i}" for i in range(size)]
        kinds += [kind] * size
    return pa.table({"id": ids, "name": names, "kind": kinds})


def _metaedge_edges(
    rng: np.random.Generator,
    sources: np.ndarray,
    targets: np.ndarray,
    num_edges: int,
    alpha: float,
    num_nodes: int,
) -> np.ndarray:
    """int64 [num_edges, 2] distinct (h, t), no self loops; ``sources`` / ``targets`` ordered
    by popularity; each appears at least once (when the pairs allow)."""
    k = max(len(sources), len(targets))
    idx = np.arange(k)
    cover = np.stack(
        [sources[idx % len(sources)], rng.permutation(targets)[idx % len(targets)]], axis=1
    )
    keys = cover[:, 0] * num_nodes + cover[:, 1]
    keys = keys[cover[:, 0] != cover[:, 1]]
    a = alpha
    for attempt in range(200):
        keys = keys[np.sort(np.unique(keys, return_index=True)[1])]  # distinct, first kept
        deficit = num_edges - len(keys)
        if deficit <= 0:
            break
        if attempt >= 8:  # saturated hubs: flatten the laws so the loop ends
            a *= 0.7
        m = int(deficit * 1.3) + 16
        ws = (np.arange(len(sources)) + 1.0) ** -a
        wt = (np.arange(len(targets)) + 1.0) ** -a
        h = sources[
            np.minimum(np.searchsorted(np.cumsum(ws / ws.sum()), rng.random(m)), len(sources) - 1)
        ]
        t = targets[
            np.minimum(np.searchsorted(np.cumsum(wt / wt.sum()), rng.random(m)), len(targets) - 1)
        ]
        new = h * num_nodes + t
        keys = np.concatenate([keys, new[h != t]])
    else:
        raise StorageError(f"could not draw {num_edges} distinct edges")
    keys = keys[:num_edges]
    return np.stack([keys // num_nodes, keys % num_nodes], axis=1)


def generate(params: dict | None = None, raw_path: str | Path | None = None) -> dict:
    """-> {"nodes": (id, name, kind) table sorted by id, "relation_names" (PyKEEN order),
    "triples": int64 [F, 3] into the node table, "params"}."""
    p = merge_params(DEFAULTS, params, "synthetic:hetionet_schema")
    scale, alpha = float(p["scale"]), float(p["alpha"])
    if not 0 < scale <= 1:
        raise StorageError(f"synthetic:hetionet_schema: scale must be in (0, 1], got {scale}")
    rng = np.random.default_rng(int(p["seed"]))
    table = node_table(raw_path)
    keep = []
    for kind in KIND_SIZES:
        rows = np.flatnonzero(pc.equal(table.column("kind"), kind).to_numpy(zero_copy_only=False))
        n_keep = min(len(rows), max(2, round(len(rows) * math.sqrt(scale))))
        keep.append(rows if n_keep == len(rows) else np.sort(rng.choice(rows, n_keep, False)))
    table = table.take(pa.array(np.concatenate(keep)))
    table = table.take(pc.sort_indices(table, [("id", "ascending")]))
    kinds = table.column("kind").to_numpy(zero_copy_only=False)
    n = len(table)
    by_kind = {k: np.flatnonzero(kinds == k) for k in KIND_SIZES}
    base = {k: rng.standard_normal(len(v)) for k, v in by_kind.items()}
    rel_names = relation_order([m[0] for m in METAEDGES])
    parts = []
    for abbr, skind, tkind, edges, s_n, t_n in METAEDGES:
        e = max(1, round(edges * scale))
        ends = []
        for kind, count in ((skind, s_n), (tkind, t_n)):
            score = base[kind] + float(p["noise"]) * rng.standard_normal(len(base[kind]))
            least = 2 if skind == tkind else 1  # room for an edge without a self loop
            c = min(len(score), max(least, min(e, round(count * math.sqrt(scale)))))
            ends.append(by_kind[kind][np.argsort(-score, kind="stable")[:c]])
        cap = len(ends[0]) * len(ends[1]) - (len(np.intersect1d(*ends)) if skind == tkind else 0)
        e = min(e, max(1, int(0.9 * cap)))
        ht = _metaedge_edges(rng, ends[0], ends[1], e, alpha, n)
        parts.append(np.stack([ht[:, 0], np.full(len(ht), rel_names.index(abbr)), ht[:, 1]], 1))
    return {
        "nodes": table,
        "relation_names": rel_names,
        "triples": np.concatenate(parts),
        "params": p,
    }


def build_hetionet_schema(params: dict | None = None, raw_path: str | Path | None = None) -> dict:
    """write_dataset keyword arguments: the generated graph, split as ``convert hetionet``."""
    from cmpnn_dist.convert.hetionet import pykeen_dataset

    g = generate(params, raw_path)
    triples, nodes = g["triples"], g["nodes"]
    used = np.flatnonzero(np.bincount(triples[:, [0, 2]].ravel(), minlength=len(nodes)))
    remap = np.full(len(nodes), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    kind_names = sorted(KIND_SIZES)
    kind_ids = pc.index_in(nodes.column("kind"), value_set=pa.array(kind_names)).to_numpy()
    out = pykeen_dataset(
        nodes.column("id").combine_chunks().take(pa.array(used)),
        kind_ids[used].astype(np.int64),
        kind_names,
        g["relation_names"],
        np.stack([remap[triples[:, 0]], triples[:, 1], remap[triples[:, 2]]], axis=1),
    )
    out["meta"].update(
        {
            "generator": "hetionet_schema",
            "params": g["params"],
            "node_table": str(Path(raw_path) / NODES_FILE) if raw_path else "generated",
        }
    )
    return out


def write_upstream(
    folder: str | Path, params: dict | None = None, raw_path: str | Path | None = None
) -> dict[str, int]:
    """Write the generated graph as hetio's ``hetionet-v1.0-edges.sif.gz`` (edges in a random
    order) and ``hetionet-v1.0-nodes.tsv`` (every node, connected or not)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    g = generate(params, raw_path)
    nodes, triples = g["nodes"], g["triples"]
    triples = triples[np.random.default_rng(1).permutation(len(triples))]
    ids = nodes.column("id").to_numpy(zero_copy_only=False)
    rels = np.asarray(g["relation_names"], dtype=object)
    lines = ["source\tmetaedge\ttarget"]
    lines += [
        "\t".join(x)
        for x in zip(ids[triples[:, 0]], rels[triples[:, 1]], ids[triples[:, 2]], strict=True)
    ]
    with gzip.open(folder / "hetionet-v1.0-edges.sif.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    cols = [nodes.column(c).to_pylist() for c in ("id", "name", "kind")]
    body = "".join(f"{a}\t{b}\t{c}\n" for a, b, c in zip(*cols, strict=True))
    (folder / NODES_FILE).write_text("id\tname\tkind\n" + body, encoding="utf-8")
    return {"edges": len(triples), "nodes": len(nodes)}
