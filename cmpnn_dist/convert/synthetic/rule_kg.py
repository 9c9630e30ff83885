"""Rule-planted knowledge graph: the built-in default dataset.

A random typed multi-relational *base* graph (types A, B, C; base relations ``b0..b7`` with
fixed type signatures and mean out-degrees) plus *target* relations that are deterministic
functions of the base graph:

    t0(x, y) <- b0(x, z) & b1(z, y)                      A -> C   (2-hop composition)
    t1(x, y) <- b2(x, z) & b0(z, y)                      A -> B   (2-hop composition)
    t2(x, y) <- #{z : b6(x, z) & b7(z, y)} >= 2          B -> B   (counting rule)
    t3(x, y) <- b5(x, z) & b2(z, y)                      C -> A   (2-hop composition)

(``x != y`` always).  ``b3`` and ``b4`` are distractors that make other 2-hop paths between
the same types.  Per target relation, ``valid_fraction`` / ``test_fraction`` of its facts are
held out; training facts are all base facts plus the remaining target facts, so every held-out
fact is derivable from the training graph.  Fully determined by the parameters (seed).
The inductive variant generates two graphs on disjoint entity sets (seed and seed + 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cmpnn_dist.convert.synthetic.params import merge_params
from cmpnn_dist.storage.writer import GraphSpec

TYPES = ["A", "B", "C"]
# name, head type, tail type, mean out-degree per head-type node
BASE = [
    ("b0", 0, 1, 1.5),
    ("b1", 1, 2, 1.5),
    ("b2", 0, 0, 1.2),
    ("b3", 2, 1, 1.5),
    ("b4", 1, 1, 1.2),
    ("b5", 2, 0, 1.5),
    ("b6", 1, 2, 4.0),
    ("b7", 2, 1, 5.0),
]
# name, first relation, second relation, minimum number of witnesses z
TARGETS = [
    ("t0", "b0", "b1", 1),
    ("t1", "b2", "b0", 1),
    ("t2", "b6", "b7", 2),
    ("t3", "b5", "b2", 1),
]
DEFAULTS: dict[str, Any] = {
    "num_entities": 1000,
    "type_fractions": [0.4, 0.35, 0.25],
    "degree_scale": 1.0,
    "num_targets": 4,
    "valid_fraction": 0.1,
    "test_fraction": 0.1,
    "seed": 0,
}


def _base_graph(p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list]:
    """Node types int64 [N], base facts int64 [F, 3], per-type node id arrays."""
    n = int(p["num_entities"])
    frac = np.asarray(p["type_fractions"], dtype=float)
    sizes = np.maximum(1, np.floor(frac / frac.sum() * n).astype(int))
    sizes[-1] = max(1, n - sizes[:-1].sum())
    types = np.repeat(np.arange(len(TYPES)), sizes)
    members = [np.flatnonzero(types == k) for k in range(len(TYPES))]
    facts = []
    for rid, (_, ht, tt, deg) in enumerate(BASE):
        m = int(round(deg * float(p["degree_scale"]) * len(members[ht])))
        h = rng.choice(members[ht], size=m)
        t = rng.choice(members[tt], size=m)
        keep = h != t
        facts.append(np.stack([h[keep], np.full(keep.sum(), rid), t[keep]], axis=1))
    f = np.unique(np.concatenate(facts), axis=0)  # sorted, distinct
    return types.astype(np.int64), f.astype(np.int64), members


def compose(a: np.ndarray, b: np.ndarray, num_nodes: int, min_count: int = 1) -> np.ndarray:
    """Pairs (x, y), x != y, with at least ``min_count`` z such that a(x,z) and b(z,y).

    Args: a, b int64 [Ea, 2], [Eb, 2] distinct edges ``(src, dst)``.  Returns int64 [P, 2]
    sorted.  Vectorised join: b sorted by z, each a-edge expanded to b's out-edges of z.
    """
    order = np.argsort(b[:, 0], kind="stable")
    bz, by = b[order, 0], b[order, 1]
    start = np.searchsorted(bz, a[:, 1], side="left")
    cnt = np.searchsorted(bz, a[:, 1], side="right") - start
    x = np.repeat(a[:, 0], cnt)
    first = np.repeat(start - np.concatenate([[0], np.cumsum(cnt)[:-1]]), cnt)
    y = by[first + np.arange(cnt.sum())]
    keys, counts = np.unique(x * num_nodes + y, return_counts=True)
    keys = keys[counts >= min_count]
    pairs = np.stack([keys // num_nodes, keys % num_nodes], axis=1)
    return pairs[pairs[:, 0] != pairs[:, 1]].astype(np.int64)


def relation_names(p: dict) -> list[str]:
    return [b[0] for b in BASE] + [t[0] for t in TARGETS[: int(p["num_targets"])]]


def generate_graph(p: dict, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """One graph: node types [N], base facts [Fb, 3], target facts per target name [Ft, 3]."""
    rng = np.random.default_rng(seed)
    types, base, _ = _base_graph(p, rng)
    n = len(types)
    by_rel = {name: base[base[:, 1] == i][:, [0, 2]] for i, (name, *_) in enumerate(BASE)}
    targets = {}
    for k, (name, r1, r2, min_count) in enumerate(TARGETS[: int(p["num_targets"])]):
        pairs = compose(by_rel[r1], by_rel[r2], n, min_count)
        rid = len(BASE) + k
        targets[name] = np.stack([pairs[:, 0], np.full(len(pairs), rid), pairs[:, 1]], axis=1)
    return types, base, targets


def _split(
    targets: dict[str, np.ndarray], fractions: tuple[float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per target relation: shuffle, hold out valid / test fractions.  -> (rest, valid, test)."""
    rest, valid, test = [], [], []
    for f in targets.values():
        f = f[rng.permutation(len(f))]
        nv, nt = int(round(fractions[0] * len(f))), int(round(fractions[1] * len(f)))
        valid.append(f[:nv])
        test.append(f[nv : nv + nt])
        rest.append(f[nv + nt :])
    cat = [
        np.concatenate(x).reshape(-1, 3) if x else np.zeros((0, 3), np.int64)
        for x in (rest, valid, test)
    ]
    return cat[0], cat[1], cat[2]


def _names(types: np.ndarray, tag: str) -> list[str]:
    local = np.zeros(len(types), dtype=np.int64)
    for k in range(len(TYPES)):
        idx = np.flatnonzero(types == k)
        local[idx] = np.arange(len(idx))
    return [f"{TYPES[t]}::{tag}{i}" for t, i in zip(types.tolist(), local.tolist(), strict=True)]


def build_rule_kg(params: dict | None = None, inductive: bool = False) -> dict:
    """-> write_dataset keyword arguments for the transductive or inductive rule KG."""
    p = merge_params(DEFAULTS, params, "synthetic:rule_kg" + ("_inductive" if inductive else ""))
    if not 1 <= int(p["num_targets"]) <= len(TARGETS):
        from cmpnn_dist.storage.errors import StorageError

        raise StorageError(f"synthetic: num_targets must be in [1, {len(TARGETS)}]")
    seed = int(p["seed"])
    fr = (float(p["valid_fraction"]), float(p["test_fraction"]))
    graphs = {}
    if not inductive:
        types, base, targets = generate_graph(p, seed)
        rest, valid, test = _split(targets, fr, np.random.default_rng(seed + 7919))
        graphs["train"] = GraphSpec(
            len(types),
            _names(types, ""),
            types,
            {"train": np.concatenate([base, rest]), "valid": valid, "test": test},
        )
    else:
        for gname, s, tag in (("train", seed, "g0_"), ("test", seed + 1, "g1_")):
            types, base, targets = generate_graph(p, s)
            rest, valid, test = _split(targets, fr, np.random.default_rng(s + 7919))
            if gname == "train":  # queries: valid; test held-out facts go back into training
                facts = {"train": np.concatenate([base, rest, test]), "valid": valid}
            else:  # the unseen graph: test queries; valid held-out facts stay in its graph
                facts = {"train": np.concatenate([base, rest, valid]), "test": test}
            graphs[gname] = GraphSpec(len(types), _names(types, tag), types, facts)
    return {
        "relation_names": relation_names(p),
        "graphs": graphs,
        "inductive": inductive,
        "node_type_names": TYPES,
        "meta": {
            "generator": "rule_kg",
            "params": p,
            "rules": [
                f"{t[0]}(x,y) <- #{{z: {t[1]}(x,z) & {t[2]}(z,y)}} >= {t[3]}"
                for t in TARGETS[: int(p["num_targets"])]
            ],
        },
    }
