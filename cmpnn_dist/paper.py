"""The paper's published numbers (Huang et al., NeurIPS 2023), keyed by the config that made
them, so that sweep reports can put the paper's figure beside each cell.

Each entry is ``(table, conditions, metric, value)``: a cell matches when every condition
(``"data.name"``, ``"model.*"`` keys) equals the cell's resolved config; ``metric`` is a key of
our results (``test_hits@10_50`` is the inductive protocol's Hits@10 against 50 negatives).
Values are typed in from the paper's tables (cited by label), the one place where a figure
is quoted rather than measured.
"""

from __future__ import annotations

from typing import Any

SPLITS = [f"wn18rr_ind_v{i}" for i in range(1, 5)] + [f"fb237_ind_v{i}" for i in range(1, 5)]

# inductive-table-cmpnn (Table 1): INIT 2, no readout; rows (aggregate, message, history)
_TABLE1 = {
    ("sum", 1, "0"): [0.934, 0.896, 0.894, 0.881, 0.784, 0.900, 0.940, 0.923],
    ("sum", 1, "t"): [0.932, 0.896, 0.900, 0.881, 0.794, 0.906, 0.947, 0.933],
    ("sum", 2, "0"): [0.939, 0.906, 0.881, 0.881, 0.734, 0.899, 0.911, 0.941],
    ("sum", 2, "t"): [0.937, 0.906, 0.865, 0.884, 0.728, 0.883, 0.929, 0.931],
    ("sum", 3, "0"): [0.943, 0.898, 0.888, 0.877, 0.850, 0.934, 0.919, 0.941],
    ("sum", 3, "t"): [0.934, 0.896, 0.892, 0.880, 0.844, 0.943, 0.926, 0.950],
    ("pna", 1, "0"): [0.943, 0.897, 0.898, 0.886, 0.801, 0.945, 0.934, 0.960],
    ("pna", 1, "t"): [0.941, 0.895, 0.904, 0.886, 0.804, 0.949, 0.945, 0.954],
    ("pna", 2, "0"): [0.946, 0.900, 0.896, 0.887, 0.715, 0.896, 0.887, 0.886],
    ("pna", 2, "t"): [0.947, 0.902, 0.901, 0.888, 0.709, 0.899, 0.875, 0.894],
    ("pna", 3, "0"): [0.947, 0.898, 0.899, 0.884, 0.788, 0.908, 0.906, 0.927],
    ("pna", 3, "t"): [0.944, 0.897, 0.894, 0.882, 0.795, 0.916, 0.908, 0.926],
}
# table:readout: PNA, MSG 1, INIT 2 (history t, the paper's default)
_READOUT = {
    "none": [0.941, 0.895, 0.904, 0.886, 0.804, 0.949, 0.945, 0.954],
    "sum": [0.946, 0.890, 0.881, 0.872, 0.799, 0.897, 0.942, 0.864],
    "relation": [0.932, 0.885, 0.882, 0.874, 0.835, 0.959, 0.953, 0.960],
}
# inductive-table-initialization: sum, MSG 1, f(t) = t, no readout
_INIT = {
    0: [0.615, 0.715, 0.811, 0.654, 0.777, 0.903, 0.894, 0.910],
    1: [0.932, 0.894, 0.902, 0.883, 0.809, 0.927, 0.944, 0.911],
    2: [0.932, 0.896, 0.900, 0.881, 0.794, 0.906, 0.947, 0.933],
    3: [0.934, 0.890, 0.894, 0.877, 0.804, 0.924, 0.941, 0.944],
}
# transductive-table-1: (family, dataset) -> MR, MRR, Hits@10; C-MPNN basic = sum, MSG 1, INIT 2
_TRANSDUCTIVE = {
    ("rgcn", "wn18rr"): (3069, 0.367, 0.405),
    ("rgcn", "fb15k237"): (210, 0.205, 0.387),
    ("compgcn", "wn18rr"): (3590, 0.433, 0.519),
    ("compgcn", "fb15k237"): (217, 0.334, 0.514),
    ("cmpnn", "wn18rr"): (687, 0.534, 0.643),
    ("cmpnn", "fb15k237"): (121, 0.400, 0.583),
}


def _entries() -> list[tuple[str, dict[str, Any], str, float]]:
    out = []
    for (agg, msg, hist), values in _TABLE1.items():
        for split, v in zip(SPLITS, values, strict=True):
            cond = {"data.name": split, "model.aggregate": agg, "model.message": msg,
                    "model.history": hist, "model.init": 2, "model.readout": "none"}  # fmt: skip
            out.append(("inductive-table-cmpnn", cond, "test_hits@10_50", v))
    for readout, values in _READOUT.items():
        for split, v in zip(SPLITS, values, strict=True):
            cond = {"data.name": split, "model.aggregate": "pna", "model.message": 1,
                    "model.history": "t", "model.init": 2, "model.readout": readout}  # fmt: skip
            out.append(("table:readout", cond, "test_hits@10_50", v))
    for init, values in _INIT.items():
        for split, v in zip(SPLITS, values, strict=True):
            cond = {"data.name": split, "model.aggregate": "sum", "model.message": 1,
                    "model.history": "t", "model.init": init, "model.readout": "none"}  # fmt: skip
            out.append(("inductive-table-initialization", cond, "test_hits@10_50", v))
    for (family, name), values in _TRANSDUCTIVE.items():
        cond: dict[str, Any] = {"data.name": name, "model.family": family}
        if family == "cmpnn":
            cond |= {"model.aggregate": "sum", "model.message": 1, "model.init": 2,
                     "model.readout": "none"}  # fmt: skip
        for metric, v in zip(("test_mr", "test_mrr", "test_hits@10"), values, strict=True):
            out.append(("transductive-table-1", cond, metric, v))
    out.append(("app:readout-synt", {"data.name": "trisqr", "model.readout": "sum"},
                "test_accuracy", 1.0))  # fmt: skip
    out.append(("app:readout-synt", {"data.name": "trisqr", "model.readout": "none"},
                "test_accuracy", 0.5))  # fmt: skip
    return out


ENTRIES = _entries()

# Published figures of peer models on the same splits, for the same comparison.  NBFNet: Zhu et
# al., "Neural Bellman-Ford Networks", NeurIPS 2021 (arXiv:2106.06935), the inductive relation
# prediction table: Hits@10 against 50 sampled negatives, GraIL's splits, in SPLITS' order.
PEERS: dict[str, dict[str, float]] = {
    "NBFNet": dict(
        zip(SPLITS, [0.948, 0.905, 0.893, 0.890, 0.834, 0.949, 0.951, 0.960], strict=True)
    ),
}


def peer_values(split: str, metric: str) -> dict[str, float]:
    """Published peer figures for ``split`` (``data.name``) and ``metric``: ``{model: value}``,
    empty where none is published (only ``test_hits@10_50`` of the GraIL splits is)."""
    if metric != "test_hits@10_50":
        return {}
    return {model: values[split] for model, values in PEERS.items() if split in values}


def paper_value(signature: dict[str, Any], metric: str) -> tuple[float, str] | None:
    """The paper's figure for a cell whose resolved config keys are ``signature`` (dotted keys
    -> values), as ``(value, table label)``; None where the paper has none.  Keys missing
    from the signature (e.g. ``model.family`` of an older run) take their defaults."""
    defaults = {"model.family": "cmpnn"}
    for table, cond, m, value in ENTRIES:
        if m != metric:
            continue
        if all(str(signature.get(k, defaults.get(k))) == str(v) for k, v in cond.items()):
            return value, table
    return None


SIGNATURE_KEYS = (
    "data.name", "model.family", "model.aggregate", "model.message", "model.history",
    "model.init", "model.readout",
)  # fmt: skip


def signature(cfg: Any) -> dict[str, Any]:
    """The config keys the paper's tables are indexed by."""
    out = {}
    for key in SIGNATURE_KEYS:
        section, name = key.split(".")
        out[key] = getattr(getattr(cfg, section), name)
    return out


def _label(cond: dict[str, Any]) -> str:
    readout = {"none": "no readout", "sum": "global sum readout", "relation": "relation readout"}
    return (
        f"C-MPNN {cond['model.aggregate']} / MSG {cond['model.message']} / "
        f"f(t) = {cond['model.history']} / INIT {cond['model.init']} / "
        f"{readout[cond['model.readout']]}"
    )


def published(split: str, metric: str = "test_hits@10_50") -> dict[str, float]:
    """Every published figure for ``split`` and ``metric``: the paper's C-MPNN rows, each once
    (a row two tables share, e.g. INIT 2 in the initialization table and Table 1, counts once),
    labelled by its config, then the peers (``PEERS``) under their names.  ``{label: value}``."""
    out: dict[str, float] = {}
    for _, cond, m, value in ENTRIES:
        if m == metric and cond.get("data.name") == split and "model.aggregate" in cond:
            out.setdefault(_label(cond), value)
    return out | peer_values(split, metric)
