"""A synthetic graph at ogbl-biokg scale, for benchmarks.

93,773 nodes in 5 types (biokg's type sizes), 51 relations each with a (head type, tail type)
signature, 4,762,677 distinct training facts (+ 162,886 valid and test facts each), skewed
degrees: within a type, node ``i`` of a random ranking is drawn with probability
``~ (rank + 1) ** -alpha``; relation sizes are Zipf-like.  ``scale`` multiplies all counts
(tests use ``scale=0.01``).  Entity names are ``Kind::<id>`` (node types by prefix).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from cmpnn_dist.convert.common import dedupe
from cmpnn_dist.convert.synthetic.params import merge_params
from cmpnn_dist.storage.writer import GraphSpec

TYPES = ["disease", "drug", "function", "protein", "sideeffect"]
TYPE_SIZES = [10_687, 10_533, 45_085, 17_499, 9_969]  # sum 93,773
DEFAULTS = {
    "scale": 1.0,
    "num_relations": 51,
    "num_train": 4_762_677,
    "num_valid": 162_886,
    "num_test": 162_886,
    "alpha": 0.8,
    "seed": 0,
}


def typed_power_law(
    sizes: list[int], alpha: float, rng: np.random.Generator
) -> Callable[[int, int], np.ndarray]:
    """``draw(kind, m)``: ``m`` node ids of type ``kind`` (types laid out one after the other,
    ``sizes`` nodes each), the node of rank i in a random ranking of its type drawn with
    probability ~ (i + 1) ** -alpha."""
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cdf = []
    for s in sizes:
        w = 1.0 / (rng.permutation(s) + 1.0) ** alpha
        cdf.append(np.cumsum(w / w.sum()))

    def draw(kind: int, m: int) -> np.ndarray:
        idx = np.searchsorted(cdf[kind], rng.random(m), side="right")
        return offsets[kind] + np.minimum(idx, sizes[kind] - 1)

    return draw


def generate(params: dict | None = None) -> dict:
    """-> {"node_types" [N], "type_sizes", "relation_names", "facts": {split: [F, 3]}}."""
    p = merge_params(DEFAULTS, params, "synthetic:biokg_scale")
    rng = np.random.default_rng(int(p["seed"]))
    scale = float(p["scale"])
    sizes = [max(2, int(round(s * scale))) for s in TYPE_SIZES]
    n = int(sum(sizes))
    num_rel = int(p["num_relations"])
    wanted = {s: int(round(int(p[f"num_{s}"]) * scale)) for s in ("train", "valid", "test")}
    total = sum(wanted.values())
    sig = rng.integers(0, len(TYPES), size=(num_rel, 2))
    share = 1.0 / (np.arange(num_rel) + 1.0) ** 0.7
    share = rng.permutation(share / share.sum())
    draw = typed_power_law(sizes, float(p["alpha"]), rng)

    facts = np.zeros((0, 3), dtype=np.int64)
    while len(facts) < total:
        need = int((total - len(facts)) * 1.15) + 16
        counts = rng.multinomial(need, share)
        parts = [
            np.stack([draw(sig[r, 0], c), np.full(c, r), draw(sig[r, 1], c)], axis=1)
            for r, c in enumerate(counts)
            if c
        ]
        facts, _ = dedupe(np.concatenate([facts, *parts]).astype(np.int64), n, num_rel)
    facts = facts[:total][rng.permutation(total)]
    a, b = wanted["train"], wanted["train"] + wanted["valid"]
    return {
        "node_types": np.repeat(np.arange(len(TYPES)), sizes).astype(np.int64),
        "type_sizes": sizes,
        "relation_names": [f"rel{r:02d}" for r in range(num_rel)],
        "facts": {"train": facts[:a], "valid": facts[a:b], "test": facts[b:]},
        "params": p,
    }


def entity_names(node_types: np.ndarray) -> pa.Array:
    kinds = np.asarray(TYPES, dtype=object)[node_types]
    return pa.array(
        [f"{k}::{i}" for k, i in zip(kinds.tolist(), range(len(node_types)), strict=True)],
        type=pa.string(),
    )


def build_biokg_scale(params: dict | None = None) -> dict:
    g = generate(params)
    nt = g["node_types"]
    spec = GraphSpec(len(nt), entity_names(nt), nt, g["facts"])
    return {
        "relation_names": g["relation_names"],
        "graphs": {"train": spec},
        "inductive": False,
        "node_type_names": TYPES,
        "meta": {"generator": "biokg_scale", "params": g["params"]},
    }


def write_tsv(folder: str | Path, params: dict | None = None) -> dict[str, int]:
    """Write the graph as ``train/valid/test.txt`` (``Kind::id<TAB>relN<TAB>Kind::id``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    g = generate(params)
    names = entity_names(g["node_types"])
    rels = pa.array(g["relation_names"], type=pa.string())
    counts = {}
    for split, f in g["facts"].items():
        table = pa.table(
            {
                "h": names.take(pa.array(f[:, 0])),
                "r": rels.take(pa.array(f[:, 1])),
                "t": names.take(pa.array(f[:, 2])),
            }
        )
        opts = pcsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
        pcsv.write_csv(table, folder / f"{split}.txt", write_options=opts)
        counts[split] = len(f)
    return counts
