"""Memory-mapped reader: Arrow IPC files -> zero-copy torch tensors.

Each file is opened with ``pyarrow.memory_map`` and read with the IPC file reader; the
column buffers then point into the mapping and ``torch.frombuffer`` wraps them without a
copy.  The mappings are read-only: tensors handed out here must not be written in place
(copy them first, e.g. ``t.clone()``).  Every open checks sizes, then the sha256 of each file
it will map before anything reads it (once per file content: a verification stamp remembers
clean files, :mod:`cmpnn_dist.storage.integrity`), then the cheap structural checks as each
file is mapped.  ``python -m cmpnn_dist.storage verify PATH`` hashes every file regardless.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.storage import format as fmt
from cmpnn_dist.storage.errors import StorageError
from cmpnn_dist.storage.integrity import check_content


def _tensor(buf: pa.Buffer | None, length: int, path: Path, what: str) -> Tensor:
    """Zero-copy int64 [length] view of an Arrow data buffer."""
    if length == 0:
        return torch.empty(0, dtype=torch.int64)
    if buf is None or buf.size < 8 * length:
        raise StorageError(f"{what}: data buffer shorter than {length} int64 values", path)
    with warnings.catch_warnings():  # the mapping is read-only; torch warns about that
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(memoryview(buf), dtype=torch.int64, count=length)


def _int_array(arr: pa.Array, path: Path, what: str) -> Tensor:
    if arr.type != pa.int64() or arr.null_count or arr.offset:
        raise StorageError(
            f"{what}: expected a non-null, unsliced int64 column, got {arr.type}", path
        )
    return _tensor(arr.buffers()[1], len(arr), path, what)


def read_batch(path: Path, schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Map ``path`` and return its single record batch (buffers point into the mapping)."""
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        if schema is not None and not reader.schema.equals(schema):
            raise StorageError(f"schema {reader.schema} differs from expected {schema}", path)
        if reader.num_record_batches != 1:
            raise StorageError(f"{reader.num_record_batches} record batches, expected 1", path)
        return reader.get_batch(0)
    except (pa.ArrowException, OSError) as exc:
        raise StorageError(f"unreadable Arrow IPC file ({exc})", path) from exc


def _in_range(t: Tensor, upper: int) -> bool:
    """``0 <= t < upper`` for every element (one pass: aminmax)."""
    lo, hi = torch.aminmax(t)
    return int(lo) >= 0 and int(hi) < upper


@dataclass(eq=False)
class CSRShard:
    """Rows ``node_start:node_end`` of the destination-sorted CSR (zero-copy views).

    Attributes: indptr int64 [rows+1] local offsets (``indptr[0] == 0``); src, rel int64 [E_k];
    the in-edges of global node ``v`` are ``src[indptr[v-node_start]:indptr[v-node_start+1]]``.
    """

    node_start: int
    node_end: int
    indptr: Tensor
    src: Tensor
    rel: Tensor
    path: Path

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())


def load_shard(path: Path, entry: dict[str, Any], num_nodes: int, num_rel2: int) -> CSRShard:
    """Map one shard file and run the structural checks (sizes, monotone offsets, id ranges)."""
    batch = read_batch(path, fmt.CSR_SCHEMA)
    col = batch.column(0)
    rows = entry["node_end"] - entry["node_start"]
    if len(col) != rows or col.offset or col.null_count:
        raise StorageError(f"{len(col)} rows, manifest says {rows}", path)
    indptr = _tensor(col.buffers()[1], rows + 1, path, "row offsets")
    edges = col.values
    src = _int_array(edges.field("src"), path, "src")
    rel = _int_array(edges.field("rel"), path, "rel")
    e = entry["num_edges"]
    if src.numel() != e or rel.numel() != e:
        raise StorageError(f"{src.numel()} edges, manifest says {e}", path)
    if int(indptr[0]) != 0 or int(indptr[-1]) != e:
        raise StorageError(
            f"row offsets span [{int(indptr[0])}, {int(indptr[-1])}], expected [0, {e}]", path
        )
    if rows and bool((indptr[1:] < indptr[:-1]).any()):
        raise StorageError("row offsets are not monotone", path)
    if e and not _in_range(src, num_nodes):
        raise StorageError(f"source id out of range [0, {num_nodes})", path)
    if e and not _in_range(rel, num_rel2):
        raise StorageError(f"relation id out of range [0, {num_rel2})", path)
    return CSRShard(entry["node_start"], entry["node_end"], indptr, src, rel, path)


class GraphData:
    """One graph of a dataset (``"train"``, or ``"test"`` for inductive datasets)."""

    def __init__(self, ds: Dataset, name: str, shard_ids: list[int] | None) -> None:
        self._ds, self.name = ds, name
        self._meta = ds.manifest["graphs"][name]
        self.num_nodes: int = int(self._meta["num_nodes"])
        self.num_edges: int = int(self._meta["num_edges"])
        self.node_type_names: list[str] = list(ds.manifest["node_types"])
        # relations whose train facts are queries only, not message-passing edges (TRI-SQR r0)
        self.query_only_relations: list[int] = list(self._meta.get("query_only_relations", []))
        n_shards = len(self._meta["shards"])
        self._shard_ids = list(range(n_shards)) if shard_ids is None else shard_ids
        for k in self._shard_ids:
            if not 0 <= k < n_shards:
                raise StorageError(
                    f"graph {name!r} has {n_shards} shards; asked for shard {k}",
                    ds.path / fmt.MANIFEST,
                )
        self._cache: dict[str, Any] = {}
        self._entities = read_batch(
            ds.path / fmt.entities_file(name), fmt.entities_schema(self._meta["has_node_types"])
        )
        if self._entities.num_rows != self.num_nodes:
            raise StorageError(
                f"{self._entities.num_rows} entities, manifest says {self.num_nodes}",
                ds.path / fmt.entities_file(name),
            )
        self.node_types: Tensor | None = None
        if self._meta["has_node_types"]:
            path = ds.path / fmt.entities_file(name)
            self.node_types = _int_array(self._entities.column("type"), path, "type")
            if self.num_nodes and (
                int(self.node_types.min()) < 0
                or int(self.node_types.max()) >= len(self.node_type_names)
            ):
                raise StorageError("node type id out of range", path)

    @property
    def entity_names(self) -> list[str]:
        """N entity names (decoded on first access)."""
        if "names" not in self._cache:
            self._cache["names"] = self._entities.column("name").to_pylist()
        return self._cache["names"]

    def facts(self, split: str) -> Tensor:
        """int64 [F, 3] facts ``(h, r, t)`` of ``split`` (a copy: columns -> rows; cached)."""
        if split not in fmt.SPLITS:
            raise KeyError(f"split must be one of {fmt.SPLITS}, got {split!r}")
        key = f"facts_{split}"
        if key not in self._cache:
            path = self._ds.path / fmt.facts_file(self.name, split)
            batch = read_batch(path, fmt.FACTS_SCHEMA)
            if batch.num_rows != self._meta["facts"][split]:
                raise StorageError(
                    f"{batch.num_rows} facts, manifest says {self._meta['facts'][split]}", path
                )
            cols = [_int_array(batch.column(c), path, c) for c in ("head", "relation", "tail")]
            f = torch.stack(cols, dim=1) if batch.num_rows else torch.zeros(0, 3, dtype=torch.int64)
            n, r = self.num_nodes, self._ds.num_relations
            if len(f) and (
                int(f[:, [0, 2]].min()) < 0
                or int(f[:, [0, 2]].max()) >= n
                or int(f[:, 1].min()) < 0
                or int(f[:, 1].max()) >= r
            ):
                raise StorageError("fact ids out of range", path)
            self._cache[key] = f
        return self._cache[key]

    def shards(self) -> list[CSRShard]:
        """The selected CSR shards (mapped on first call; zero-copy views)."""
        if "shards" not in self._cache:
            metas = self._meta["shards"]
            out = []
            for k in self._shard_ids:
                out.append(
                    load_shard(
                        self._ds.path / metas[k]["file"],
                        metas[k],
                        self.num_nodes,
                        2 * self._ds.num_relations,
                    )
                )
            self._cache["shards"] = out
        return self._cache["shards"]

    def graph(self) -> Graph:
        """The whole message-passing graph (train facts + inverse edges) as a :class:`Graph`.

        Train facts of ``query_only_relations`` (if any) are not part of it.

        One shard: zero-copy views.  Several: ``indptr`` concatenated (each shard's offsets
        shifted by the edges before it), ``src``/``rel`` concatenated; cached.
        """
        if "graph" not in self._cache:
            if len(self._shard_ids) != len(self._meta["shards"]):
                raise StorageError(
                    f"graph() needs all shards of graph {self.name!r}; the "
                    f"dataset was opened with shards={self._shard_ids}",
                    self._ds.path,
                )
            shards = self.shards()
            r2 = 2 * self._ds.num_relations
            if len(shards) == 1:
                s = shards[0]
                g = Graph(self.num_nodes, r2, s.indptr, s.src, s.rel)
            else:
                starts, offs, total = [], [], 0
                for s in shards:
                    offs.append(s.indptr[:-1] + total)
                    total += s.num_edges
                    starts.append(s.src)
                offs.append(torch.tensor([total], dtype=torch.int64))
                g = Graph(
                    self.num_nodes,
                    r2,
                    torch.cat(offs),
                    torch.cat(starts),
                    torch.cat([s.rel for s in shards]),
                )
            self._cache["graph"] = g
        return self._cache["graph"]


class Dataset:
    """An opened dataset folder; see ``docs/design.md`` ("Storage")."""

    def __init__(self, path: Path, manifest: dict[str, Any], shards: list[int] | None) -> None:
        self.path = path
        self.manifest = manifest
        self.name: str = manifest["name"]
        self.inductive: bool = bool(manifest["inductive"])
        self.num_relations: int = int(manifest["num_relations"])
        self.relation_names: list[str] = list(manifest["relations"])
        self.node_type_names: list[str] = list(manifest["node_types"])
        self.graph_names: list[str] = ["train", "test"] if self.inductive else ["train"]
        if sorted(manifest["graphs"]) != sorted(self.graph_names):
            raise StorageError(
                f"graphs {sorted(manifest['graphs'])}, expected {self.graph_names}",
                path / fmt.MANIFEST,
            )
        self._shards = shards
        self._graphs: dict[str, GraphData] = {}
        self._negatives: dict[str, dict[str, Tensor]] = {}

    @property
    def source(self) -> dict[str, Any]:
        """Conversion details (converter, raw path, dropped duplicates / unseen facts)."""
        return dict(self.manifest.get("source", {}))

    def graph_data(self, name: str = "train") -> GraphData:
        if name not in self.graph_names:
            raise KeyError(f"dataset {self.name!r} has graphs {self.graph_names}, not {name!r}")
        if name not in self._graphs:
            self._graphs[name] = GraphData(self, name, self._shards)
        return self._graphs[name]

    def negatives(self, split: str) -> dict[str, Tensor] | None:
        """OGB's official candidates ``{"head_neg", "tail_neg"}`` int64 [F, K], or None."""
        meta = self.manifest.get("negatives", {}).get(split)
        if meta is None:
            return None
        if split not in self._negatives:
            path = self.path / meta["file"]
            batch = read_batch(path)
            out = {}
            for key in ("head_neg", "tail_neg"):
                col = batch.column(key)
                k = meta["num_candidates"]
                flat = _int_array(col.values, path, key) if len(col) else torch.empty(0)
                out[key] = flat.view(len(col), k)
            self._negatives[split] = out
        return self._negatives[split]


def _check_files(path: Path, manifest: dict[str, Any]) -> None:
    """Every file in the manifest exists with its recorded size; shards tile [0, N)."""
    for rel, info in manifest["files"].items():
        p = path / rel
        if not p.is_file():
            raise StorageError("file listed in manifest.json is missing", p)
        size = p.stat().st_size
        if size != info["bytes"]:
            raise StorageError(
                f"{size} bytes, manifest says {info['bytes']} (truncated or altered)", p
            )
    for gname, g in manifest["graphs"].items():
        pos, edges = 0, 0
        for s in g["shards"]:
            if s["node_start"] != pos or s["node_end"] < s["node_start"]:
                raise StorageError(
                    f"graph {gname}: shard node ranges do not tile [0, N)", path / fmt.MANIFEST
                )
            if s["file"] not in manifest["files"]:
                raise StorageError(f"shard {s['file']} not listed under files", path / fmt.MANIFEST)
            pos, edges = s["node_end"], edges + s["num_edges"]
        if pos != g["num_nodes"] or edges != g["num_edges"]:
            raise StorageError(
                f"graph {gname}: shards cover {pos} nodes / {edges} edges, "
                f"manifest says {g['num_nodes']} / {g['num_edges']}",
                path / fmt.MANIFEST,
            )


def used_files(manifest: dict[str, Any], shards: list[int] | None) -> list[str]:
    """The manifest's files an open with ``shards`` maps: every file but the CSR shards
    outside the selection."""
    skipped: set[str] = set()
    if shards is not None:
        keep = set(shards)
        for g in manifest["graphs"].values():
            skipped.update(s["file"] for k, s in enumerate(g["shards"]) if k not in keep)
    return [name for name in manifest["files"] if name not in skipped]


def open_dataset(
    path: str | Path, shards: Iterable[int] | range | None = None, verify: bool | str = "stamp"
) -> Dataset:
    """Open a dataset folder.

    Args:
        path: the dataset folder (holding ``manifest.json``).
        shards: which CSR shards each graph maps (None: all); a range of shard indices serves
            graph-parallel workers (``GraphData.graph()`` then refuses).
        verify: the sha256 check of every file this open maps, before any is read:
            ``"stamp"`` (default) hashes the files whose content no verification stamp vouches
            for (:mod:`cmpnn_dist.storage.integrity`); ``"full"`` (or True) hashes every byte;
            ``"none"`` (or False) checks sizes and structure only.
    """
    mode = "full" if verify is True else "none" if verify is False else str(verify)
    root = Path(path).expanduser().resolve()
    manifest = fmt.read_manifest(root)
    _check_files(root, manifest)
    selected = None if shards is None else [int(k) for k in shards]
    check_content(root, manifest, used_files(manifest, selected), mode)
    return Dataset(root, manifest, selected)
