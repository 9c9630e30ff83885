"""Rule-planted graph in ogbl-biokg's shape: its node types and sizes, its 51 relations with
their type signatures, skewed degrees, and four relations that follow planted rules.

Node types and sizes are biokg's (``scale`` multiplies them; ``scale=0.1`` is a tenth):
disease 10,687, drug 10,533, function 45,085, protein 17,499, sideeffect 9,969.  Relations
(biokg's 51 names, each with biokg's signature): ``disease-protein``, ``drug-disease``,
``drug-protein``, ``drug-sideeffect``, ``function-function``, ``protein-function``, seven
``protein-protein_<kind>`` and 38 ``drug-drug_<k>``.  Base facts are drawn per relation with a
mean out-degree per head node (``DEGREES``; 451,908 training facts at ``scale=0.1`` with the
rule-added ones, biokg has 476 K per tenth) between nodes picked by a power law within each
type (:func:`biokg_scale.typed_power_law`).

Planted rules (``x != y``; ``r^-1`` is the inverse direction):

    drug-disease(x, y)     <- drug-protein(x, p) & disease-protein^-1(p, y)             (>= 1)
    drug-drug_0(x, y)      <- drug-protein(x, p) & drug-protein^-1(p, y)                (>= 1)
    drug-sideeffect(x, s)  <- #{z : drug-drug_1(x, z) & drug-sideeffect(z, s)} >= 2
    protein-function(p, f) <- #{q : protein-protein_binding(p, q) & protein-function(q, f)} >= 2

The first two relations hold only their rule's facts; the last two hold random base facts
plus the facts their rule adds to those (one round, computed on the base facts).  Valid and
test facts are drawn from the rule-added facts only (``valid_per_rule`` / ``test_per_rule``
each, times ``scale``), so every held-out fact is derivable from the training graph.
Entity names are ``Kind::<id>`` (node types by prefix).  Fully determined by the parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cmpnn_dist.convert.common import dedupe
from cmpnn_dist.convert.synthetic.biokg_scale import (
    TYPE_SIZES,
    TYPES,
    entity_names,
    typed_power_law,
)
from cmpnn_dist.convert.synthetic.params import merge_params
from cmpnn_dist.convert.synthetic.rule_kg import compose
from cmpnn_dist.storage.writer import GraphSpec

DISEASE, DRUG, FUNCTION, PROTEIN, SIDEEFFECT = range(5)
PPI = ["activation", "binding", "catalysis", "expression", "inhibition", "ptmod", "reaction"]
# name -> (head type, tail type, mean out-degree per head node of the base draw; 0: rule only)
DEGREES: dict[str, tuple[int, int, float]] = {
    "disease-protein": (DISEASE, PROTEIN, 3.0),
    "drug-disease": (DRUG, DISEASE, 0.0),
    "drug-protein": (DRUG, PROTEIN, 3.0),
    "drug-sideeffect": (DRUG, SIDEEFFECT, 20.0),
    "function-function": (FUNCTION, FUNCTION, 20.0),
    "protein-function": (PROTEIN, FUNCTION, 15.0),
    **{f"protein-protein_{k}": (PROTEIN, PROTEIN, 8.0) for k in PPI},
    "drug-drug_0": (DRUG, DRUG, 0.0),
    **{f"drug-drug_{k}": (DRUG, DRUG, 4.0) for k in range(1, 38)},
}
RELATIONS = list(DEGREES)
# target, first relation (inverse?), second relation (inverse?), minimum witnesses
RULES = [
    ("drug-disease", ("drug-protein", False), ("disease-protein", True), 1),
    ("drug-drug_0", ("drug-protein", False), ("drug-protein", True), 1),
    ("drug-sideeffect", ("drug-drug_1", False), ("drug-sideeffect", False), 2),
    ("protein-function", ("protein-protein_binding", False), ("protein-function", False), 2),
]
DEFAULTS: dict[str, Any] = {
    "scale": 1.0,
    "alpha": 0.5,
    "degree_scale": 1.0,
    "valid_per_rule": 2000,
    "test_per_rule": 2000,
    "seed": 0,
}


def _base(p: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Node types int64 [N] and base edges per relation, int64 [E_r, 2] (distinct, x != y)."""
    sizes = [max(2, int(round(s * float(p["scale"])))) for s in TYPE_SIZES]
    draw = typed_power_law(sizes, float(p["alpha"]), rng)

    edges = {}
    for name, (ht, tt, deg) in DEGREES.items():
        m = int(round(deg * float(p["degree_scale"]) * sizes[ht]))
        e = np.stack([draw(ht, m), draw(tt, m)], axis=1).astype(np.int64)
        e = np.unique(e[e[:, 0] != e[:, 1]], axis=0).reshape(-1, 2)
        edges[name] = e
    types = np.repeat(np.arange(len(TYPES)), sizes).astype(np.int64)
    return types, edges


def generate(params: dict | None = None) -> dict:
    """-> {"node_types" [N], "relation_names", "facts": {split: int64 [F, 3]}, "params",
    "rule_counts": {target: facts its rule added}}."""
    p = merge_params(DEFAULTS, params, "synthetic:biokg_rules")
    rng = np.random.default_rng(int(p["seed"]))
    types, edges = _base(p, rng)
    n = len(types)
    rid = {name: i for i, name in enumerate(RELATIONS)}
    added = {}
    for target, (r1, inv1), (r2, inv2), k in RULES:
        a = edges[r1][:, ::-1] if inv1 else edges[r1]
        b = edges[r2][:, ::-1] if inv2 else edges[r2]
        pairs = compose(np.ascontiguousarray(a), np.ascontiguousarray(b), n, k)
        base_keys = edges[target][:, 0] * n + edges[target][:, 1]
        new = pairs[~np.isin(pairs[:, 0] * n + pairs[:, 1], base_keys)]
        added[target] = new[rng.permutation(len(new))]
    scale = float(p["scale"])
    nv, nt = (max(1, int(round(int(p[k]) * scale))) for k in ("valid_per_rule", "test_per_rule"))
    train, valid, test = [], [], []

    def facts(name: str, e: np.ndarray) -> np.ndarray:
        return np.stack([e[:, 0], np.full(len(e), rid[name]), e[:, 1]], axis=1)

    for name, e in edges.items():
        train.append(facts(name, e))
    for target, new in added.items():
        v, t = min(nv, len(new) // 4), min(nt, len(new) // 4)  # most stay in training
        valid.append(facts(target, new[:v]))
        test.append(facts(target, new[v : v + t]))
        train.append(facts(target, new[v + t :]))
    out = {}
    for split, parts in (("train", train), ("valid", valid), ("test", test)):
        f, _ = dedupe(np.concatenate(parts).astype(np.int64), n, len(RELATIONS))
        out[split] = f
    return {
        "node_types": types,
        "relation_names": RELATIONS,
        "facts": out,
        "params": p,
        "rule_counts": {t: int(len(a)) for t, a in added.items()},
    }


def build_biokg_rules(params: dict | None = None) -> dict:
    """-> write_dataset keyword arguments (one transductive graph, typed)."""
    g = generate(params)
    nt = g["node_types"]
    return {
        "relation_names": g["relation_names"],
        "graphs": {"train": GraphSpec(len(nt), entity_names(nt), nt, g["facts"])},
        "inductive": False,
        "node_type_names": TYPES,
        "meta": {
            "generator": "biokg_rules",
            "params": g["params"],
            "rule_counts": g["rule_counts"],
            "rules": [
                f"{t}(x,y) <- #{{z: {a[0]}{'^-1' if a[1] else ''}(x,z) & "
                f"{b[0]}{'^-1' if b[1] else ''}(z,y)}} >= {k}"
                for t, a, b, k in RULES
            ],
        },
    }
