"""Fixture writers for the storage / convert tests (small graphs in upstream layouts)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch


def random_facts(rng: np.random.Generator, n: int, r: int, f: int) -> np.ndarray:
    return np.stack([rng.integers(0, n, f), rng.integers(0, r, f), rng.integers(0, n, f)], 1)


def write_tsv(path: Path, rows: list[tuple[str, ...]] | list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else "\t".join(r) for r in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def reference_csr(n: int, r: int, facts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Obvious CSR: per destination, the sorted list of (src, rel) incl. inverse edges."""
    rows: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for h, rel, t in np.asarray(facts).tolist():
        rows[t].append((h, rel))
        rows[h].append((t, rel + r))
    indptr = np.zeros(n + 1, dtype=np.int64)
    src, rels = [], []
    for v in range(n):
        row = sorted(rows[v])
        indptr[v + 1] = indptr[v] + len(row)
        src += [s for s, _ in row]
        rels += [q for _, q in row]
    return indptr, np.array(src, dtype=np.int64), np.array(rels, dtype=np.int64)


# --------------------------------------------------------------------------- OGB
OGB_TYPES = {"disease": 4, "drug": 5, "protein": 6}
# (head type, relation name, tail type, relation id)
OGB_TRIPLETS = [
    ("drug", "drug-disease", "disease", 0),
    ("drug", "drug-protein", "protein", 1),
    ("protein", "protein-protein", "protein", 2),
]


def _csv_gz(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(line + "\n" for line in lines))


def write_ogb_biokg(root: Path, seed: int = 0, num_neg: int = 7) -> dict:
    """A tiny ogbl-biokg in OGB's raw on-disk layout (as biokg.zip unpacks, renamed).

    Returns the expected facts per split in global ids (types sorted by name, offsets by type
    sizes) and the negatives in global ids.
    """
    rng = np.random.default_rng(seed)
    d = root / "ogbl_biokg"
    (d / "RELEASE_v1.txt").parent.mkdir(parents=True, exist_ok=True)
    (d / "RELEASE_v1.txt").write_text("ogbl-biokg v1 (test fixture)\n")
    types = sorted(OGB_TYPES)
    _csv_gz(
        d / "raw" / "num-node-dict.csv.gz",
        [",".join(types), ",".join(str(OGB_TYPES[t]) for t in types)],
    )
    _csv_gz(d / "raw" / "triplet-type-list.csv.gz", [f"{h},{r},{t}" for h, r, t, _ in OGB_TRIPLETS])
    offsets = dict(
        zip(types, np.cumsum([0] + [OGB_TYPES[t] for t in types])[:-1].tolist(), strict=True)
    )
    rows = {"train": [], "valid": [], "test": []}
    for ht, rname, tt, rid in OGB_TRIPLETS:
        pairs = {
            (int(rng.integers(OGB_TYPES[ht])), int(rng.integers(OGB_TYPES[tt]))) for _ in range(12)
        }
        pairs = sorted(pairs)
        sub = d / "raw" / "relations" / f"{ht}___{rname}___{tt}"
        _csv_gz(sub / "edge.csv.gz", [f"{a},{b}" for a, b in pairs])
        _csv_gz(sub / "num-edge-list.csv.gz", [str(len(pairs))])
        _csv_gz(sub / "edge_reltype.csv.gz", [str(rid)] * len(pairs))
        for i, (a, b) in enumerate(pairs):
            split = "valid" if i % 5 == 1 else "test" if i % 5 == 2 else "train"
            rows[split].append((a, rid, b, ht, tt))
    expected = {}
    split_dir = d / "split" / "random"
    split_dir.mkdir(parents=True, exist_ok=True)
    for split, rs in rows.items():
        dd = {
            "head": torch.tensor([x[0] for x in rs]),
            "relation": torch.tensor([x[1] for x in rs]),
            "tail": torch.tensor([x[2] for x in rs]),
            "head_type": [x[3] for x in rs],
            "tail_type": [x[4] for x in rs],
        }
        expected[split] = np.array(
            [[offsets[x[3]] + x[0], x[1], offsets[x[4]] + x[2]] for x in rs], dtype=np.int64
        )
        if split != "train":
            hn = torch.stack([torch.randint(OGB_TYPES[x[3]], (num_neg,)) for x in rs])
            tn = torch.stack([torch.randint(OGB_TYPES[x[4]], (num_neg,)) for x in rs])
            dd["head_neg"], dd["tail_neg"] = hn, tn
            expected[f"{split}_neg"] = {
                "head_neg": hn.numpy() + np.array([offsets[x[3]] for x in rs])[:, None],
                "tail_neg": tn.numpy() + np.array([offsets[x[4]] for x in rs])[:, None],
            }
        torch.save(dd, split_dir / f"{split}.pt")
    expected["types"] = types
    expected["num_nodes"] = sum(OGB_TYPES.values())
    return expected


# --------------------------------------------------------------------------- Hetionet
def write_hetionet(folder: Path, header: bool = True) -> dict[str, list[tuple[str, str, str]]]:
    rows = {
        "train": [
            ("Compound::DB00001", "CtD", "Disease::DOID:1234"),
            ("Compound::DB00002", "CtD", "Disease::DOID:1234"),
            ("Gene::100", "GiG", "Gene::200"),
            ("Compound::DB00001", "CbG", "Gene::100"),
            ("Compound::DB00002", "CbG", "Gene::200"),
            ("Disease::DOID:9", "DaG", "Gene::200"),
        ],
        "valid": [("Compound::DB00001", "CtD", "Disease::DOID:9")],
        "test": [
            ("Compound::DB00002", "CtD", "Disease::DOID:9"),
            ("Gene::200", "GiG", "Gene::100"),
        ],
    }
    for split, rs in rows.items():
        lines = (["source\tmetaedge\ttarget"] if header else []) + ["\t".join(r) for r in rs]
        write_tsv(folder / f"{split}.tsv", lines)
    return rows
