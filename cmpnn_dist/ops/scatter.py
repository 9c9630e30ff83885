"""Message passing with torch-scatter's ``segment_csr`` (``ops.impl=scatter``; optional extra).

Destination rows are cut into blocks of at most ``chunk_elements`` message entries
(edges x B x d).  Per block the kept messages ``m_e`` [E_blk, B, d] are built (the message
function's ``compute`` on its prepared parameters, times the edge weights) and reduced over
the block's CSR segments with ``segment_csr`` (sum, sum of squares, max, min; empty segments
give 0).  Each block runs under ``torch.utils.checkpoint`` so the backward recomputes its
messages: peak memory is one block of messages, never |E| x B x d.  Compared with
``reference`` this replaces the
``index_add`` / ``scatter_reduce`` of a block by one sorted-segment kernel per statistic
(no atomics, no index tensor expansion over B x d).  Measured on this project's 2-core CPU it
is about 9x slower than ``reference`` (torch-scatter's CPU segment kernels are serial); it is
kept as an independent cross-check, never chosen by ``ops.impl=auto``.

torch-scatter has no PyPI wheels for current torch (a source build takes minutes); without
it this module raises ImportError on import and the dispatcher reports it as unavailable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.messages import as_params, get_message
from cmpnn_dist.ops.naive import edge_scale

try:
    from torch_scatter import segment_csr
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "ops impl 'scatter' needs torch-scatter, which is not installed (no PyPI wheels for "
        "current torch: `pip install torch-scatter` builds from source); "
        "use ops.impl=reference (CPU) or fused (CUDA)"
    ) from exc


def row_blocks(indptr: np.ndarray, edges_per_block: int) -> list[tuple[int, int]]:
    """Consecutive destination-row ranges with at most ``edges_per_block`` edges each
    (a single row with more edges forms its own block)."""
    n = len(indptr) - 1
    bounds, lo = [], 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + edges_per_block, side="right")) - 1
        hi = min(max(hi, lo + 1), n)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def _block(
    x: Tensor,
    rel_params: tuple[Tensor, ...],
    src: Tensor,
    rel: Tensor,
    indptr: Tensor,
    message: str,
    aggregators: tuple[str, ...],
    scale: Tensor | None = None,
) -> tuple[Tensor, ...]:
    msg = get_message(message).compute(x[src], rel, rel_params)  # rel_params prepared
    if scale is not None:  # kept edges' weights [E_blk, B or 1, 1]
        msg = msg * scale
    outs = []
    for agg in aggregators:
        if agg == "sum":
            outs.append(segment_csr(msg, indptr, reduce="sum"))
        elif agg == "sumsq":
            outs.append(segment_csr(msg * msg, indptr, reduce="sum"))
        else:
            outs.append(segment_csr(msg, indptr, reduce=agg))
    return tuple(outs)


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    *,
    message: str,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    chunk_elements: int = 1 << 24,
    **_: object,
) -> dict[str, Tensor]:
    """See :func:`cmpnn_dist.ops.propagate`."""
    aggs = tuple(aggregators)
    n, b, d = x.shape
    dev = x.device
    indptr = graph.indptr.to(dev)
    src, rel = graph.src.to(dev), graph.rel.to(dev)
    rel_params = get_message(message).prepared(as_params(relation))
    if edge_mask is not None:
        cs = torch.zeros(graph.num_edges + 1, dtype=torch.long, device=dev)
        cs[1:] = torch.cumsum(edge_mask.to(dev).long(), 0)
        indptr, src, rel = cs[indptr], src[edge_mask], rel[edge_mask]  # masked CSR
    scale = None
    if edge_weight is not None:
        scale = edge_scale(edge_weight.to(device=dev, dtype=x.dtype), edge_mask)
    indptr_np = indptr.cpu().numpy()
    blocks = row_blocks(indptr_np, max(1, chunk_elements // (b * d)))
    pieces: list[tuple[Tensor, ...]] = []
    for lo, hi in blocks:
        e0, e1 = int(indptr_np[lo]), int(indptr_np[hi])
        local = indptr[lo : hi + 1] - e0
        piece = scale[e0:e1] if scale is not None else None
        args = (x, rel_params, src[e0:e1], rel[e0:e1], local, message, aggs, piece)
        leaves = [x, *rel_params] + ([scale] if scale is not None else [])
        if torch.is_grad_enabled() and any(p.requires_grad for p in leaves):
            pieces.append(checkpoint(_block, *args, use_reentrant=False))
        else:
            pieces.append(_block(*args))
    out = {a: torch.cat([p[i] for p in pieces]) for i, a in enumerate(aggs)}
    out["degree"] = indptr.diff().to(x.dtype)
    return out
