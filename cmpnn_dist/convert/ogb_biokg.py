"""ogbl-biokg through ``ogb.linkproppred.LinkPropPredDataset`` (never downloads).

OGB's on-disk layout under ``root`` (what ``biokg.zip`` unpacks to)::

    root/ogbl_biokg/RELEASE_v1.txt
    root/ogbl_biokg/raw/num-node-dict.csv.gz, triplet-type-list.csv.gz,
        relations/<head>___<rel>___<tail>/{edge,num-edge-list,edge_reltype}.csv.gz
      or root/ogbl_biokg/processed/data_processed   (written by OGB after the first load)
    root/ogbl_biokg/split/random/{train,valid,test}.pt
        dicts: head, relation, tail int64 [F] (type-local ids), head_type, tail_type [F] str;
        valid/test also head_neg, tail_neg int64 [F, 500] (type-local ids of the head/tail type)
    root/ogbl_biokg/mapping/<type>_entidx2name.csv.gz, relidx2relname.csv.gz  (optional)

Global node id = offset of its type (types sorted by name, as OGB sorts them) + local id.
The official negatives are stored with global ids.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from cmpnn_dist.convert.common import dedupe, log
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.writer import GraphSpec

NAME = "ogbl-biokg"
DIR = "ogbl_biokg"
URL = "http://snap.stanford.edu/ogb/data/linkproppred/biokg.zip"


def _missing(root: Path) -> list[str]:
    d = root / DIR
    need = [d / "RELEASE_v1.txt"] + [
        d / "split" / "random" / f"{s}.pt" for s in ("train", "valid", "test")
    ]
    missing = [str(p) for p in need if not p.is_file()]
    if not (
        (d / "processed" / "data_processed").is_file()
        or (d / "raw" / "triplet-type-list.csv.gz").is_file()
    ):
        missing.append(f"{d}/raw/triplet-type-list.csv.gz (or {d}/processed/data_processed)")
    return missing


@contextlib.contextmanager
def _trusted_torch_load() -> Iterator[None]:
    """OGB's files hold numpy arrays and string lists; torch>=2.6 loads only weights by
    default, so allow full unpickling of these local files for the duration of the load."""
    old = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        if old is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = old


def _names(root: Path, types: list[str], sizes: list[int]) -> list[str]:
    out: list[str] = []
    for t, n in zip(types, sizes, strict=True):
        p = root / DIR / "mapping" / f"{t}_entidx2name.csv.gz"
        names = [f"{t}::{i}" for i in range(n)]
        if p.is_file():
            df = pd.read_csv(p)
            for idx, name in zip(df.iloc[:, 0].tolist(), df.iloc[:, 1].tolist(), strict=True):
                if 0 <= int(idx) < n:
                    names[int(idx)] = f"{t}::{name}"
        out.extend(names)
    return out


def _global(
    ids: np.ndarray, kinds: list[str] | np.ndarray, offset: dict[str, int], split: str
) -> np.ndarray:
    inv, uniq = pd.factorize(np.asarray(kinds, dtype=object))  # hashing, not sorting
    unknown = [k for k in uniq if k not in offset]
    if unknown:
        raise StorageError(f"split {split}: unknown node type {unknown[0]!r}")
    off = np.array([offset[k] for k in uniq], dtype=np.int64)[inv]
    return off.reshape(ids.shape[0], *([1] * (ids.ndim - 1))) + ids


def convert_biokg(root: str | Path) -> dict:
    """OGB root folder -> write_dataset keyword arguments (transductive, typed, negatives)."""
    root = Path(root).expanduser()
    missing = _missing(root)
    if missing:
        raise StorageError(
            f"ogbl-biokg files not found under {root}: missing {', '.join(missing)}. Without "
            f"network access, download {URL} elsewhere and unzip it so that "
            f"{root / DIR}/split/random/train.pt exists (the zip's 'biokg' folder renamed to "
            f"{DIR}), or point data.raw_path at the folder that holds {DIR}/.",
            root,
        )
    from ogb.linkproppred import LinkPropPredDataset

    (root / DIR / "processed").mkdir(exist_ok=True)
    with _trusted_torch_load():
        ds = LinkPropPredDataset(NAME, root=str(root))
        split = ds.get_edge_split()
    graph = ds[0]
    sizes_by_type = {k: int(v) for k, v in graph["num_nodes_dict"].items()}
    types = sorted(sizes_by_type)
    sizes = [sizes_by_type[t] for t in types]
    offset = dict(zip(types, np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist(), strict=True))
    num_nodes = int(sum(sizes))
    rel_names: dict[int, str] = {}
    for (_, rname, _), rt in graph.get("edge_reltype", {}).items():
        if len(rt):
            rel_names[int(np.asarray(rt).reshape(-1)[0])] = rname
    facts, negatives, stats = {}, {}, {"duplicates_dropped": {}}
    for s in ("train", "valid", "test"):
        d = split[s]
        h = _global(np.asarray(d["head"], dtype=np.int64), d["head_type"], offset, s)
        t = _global(np.asarray(d["tail"], dtype=np.int64), d["tail_type"], offset, s)
        r = np.asarray(d["relation"], dtype=np.int64)
        facts[s] = np.stack([h, r, t], axis=1)
        if "head_neg" in d:
            negatives[s] = {
                "head_neg": _global(
                    np.asarray(d["head_neg"], dtype=np.int64), d["head_type"], offset, s
                ),
                "tail_neg": _global(
                    np.asarray(d["tail_neg"], dtype=np.int64), d["tail_type"], offset, s
                ),
            }
    num_rel = int(
        max(
            [int(f[:, 1].max()) + 1 for f in facts.values() if len(f)]
            + [max(rel_names, default=-1) + 1]
        )
    )
    mapping = root / DIR / "mapping" / "relidx2relname.csv.gz"
    if mapping.is_file():
        df = pd.read_csv(mapping)
        rel_names.update(
            zip(df.iloc[:, 0].astype(int).tolist(), df.iloc[:, 1].astype(str).tolist(), strict=True)
        )
    for s in ("train", "valid", "test"):
        if s in negatives:  # keep facts and their negatives aligned: no de-duplication
            stats["duplicates_dropped"][s] = 0
            continue
        facts[s], dups = dedupe(facts[s], num_nodes, num_rel)
        stats["duplicates_dropped"][s] = dups
        if dups:
            log.warning("ogbl-biokg %s: dropped %d duplicate facts", s, dups)
    node_types = np.repeat(np.arange(len(types), dtype=np.int64), sizes)
    spec = GraphSpec(num_nodes, _names(root, types, sizes), node_types, facts)
    return {
        "relation_names": [rel_names.get(i, f"relation_{i}") for i in range(num_rel)],
        "graphs": {"train": spec},
        "inductive": False,
        "node_type_names": types,
        "negatives": negatives,
        "meta": {"raw_path": str(root), "stats": stats},
    }
