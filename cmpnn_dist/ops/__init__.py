"""Message-passing kernels behind one interface: :func:`propagate`.

For a destination-sorted :class:`~cmpnn_dist.graph.Graph`, node states ``x`` of B queries and
relation parameters, every edge ``e = (src_e -rel_e-> dst_e)`` that the keep-mask retains
sends a message ``m_e`` and the messages arriving at each node are reduced::

    message="mul":    m_e[b] = x[src_e, b] * relation[.., rel_e, :]
                      relation float [R2, d] (shared by the batch, MSG 2) or [B, R2, d] (MSG 1)
    message="basis":  m_e[b] = W_{rel_e} x[src_e, b],  W_r = sum_k coef[r, k] * bases[k]
                      relation = (bases float [nb, d, d], coef float [R2, nb]);
                      (W_r x)[j] = sum_i W_r[j, i] x[i]

    out["sum"][v]   = sum_{e -> v} m_e          out["sumsq"][v] = sum_{e -> v} m_e ** 2
    out["max"][v]   = max_{e -> v} m_e          out["min"][v]   = min_{e -> v} m_e
    out["degree"][v] = #{e -> v kept}           (float [N])

With ``edge_weight`` (float [E] shared by the batch, or [B, E] per query) every kept message
is scaled before the reduction, ``m_e[b] <- w_e m_e[b]`` (or ``w[b, e] m_e[b]``), and every
statistic (sum, sumsq, max, min) is taken over the scaled messages; ``degree`` still counts
kept edges.  Outputs are differentiable in the weights (gradient-based path explanations, as
in NBFNet).  A zero weight therefore removes an edge from ``sum`` / ``sumsq`` exactly, but
for ``max`` / ``min`` it is a message of value 0 and it still counts in ``degree``: remove
edges with ``edge_mask``.  Weights of exactly 1 give bit for bit the unweighted result.

Each aggregator output is float [N, B, d]; a node without a kept in-edge gets 0 everywhere.
Gradients of ``max`` / ``min`` are shared evenly between the edges that attain the extreme
(naive, reference, scatter); ``fused`` passes all of it to the first such edge (smallest edge
id, as ``torch.max(dim)`` picks one index).  Both are subgradients; they differ only on exact
ties, which random float32 inputs do produce now and then on large graphs.
bfloat16 / float16 inputs give outputs and gradients of the input dtype; ``reference`` and
``fused`` accumulate in float32 (``reference`` computes in float32 and rounds once), ``naive``
and ``scatter`` compute in the input dtype.

Implementations (``impl=``):

* ``naive``     -- :mod:`cmpnn_dist.ops.naive`: materialises all |E| x B x d messages; the oracle.
* ``reference`` -- :mod:`cmpnn_dist.ops.reference`: plain torch over destination-row blocks of at
  most ``chunk_elements`` message entries; recomputes in backward (never holds |E| x B x d).
* ``fused``     -- ``cmpnn_dist.ops.triton_mp`` (Triton; CUDA), imported lazily.
* ``scatter``   -- ``cmpnn_dist.ops.scatter`` (torch-scatter), imported lazily.
* ``auto``      -- ``fused`` for CUDA inputs when it imports and covers the call (no
  ``edge_weight``), else ``reference``.  An explicit ``impl="fused"`` with ``edge_weight``
  raises ValueError.

Every implementation module exposes
``propagate(graph, x, relation, *, message, aggregators, edge_mask=None, edge_weight=None,
**kwargs)`` (``fused`` rejects ``edge_weight``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph

IMPL_MODULES: dict[str, str] = {
    "naive": "cmpnn_dist.ops.naive",
    "reference": "cmpnn_dist.ops.reference",
    "fused": "cmpnn_dist.ops.triton_mp",
    "scatter": "cmpnn_dist.ops.scatter",
}
MESSAGES = ("mul", "basis")
AGGREGATORS = ("sum", "sumsq", "max", "min")

_loaded: dict[str, ModuleType | None] = {}


def _load(name: str) -> ModuleType | None:
    """Import the module of implementation ``name``; None when it does not import."""
    if name not in _loaded:
        if name in ("naive", "reference"):  # always present; let real bugs surface
            _loaded[name] = importlib.import_module(IMPL_MODULES[name])
        else:
            try:  # optional back ends may fail with more than ImportError (no CUDA, ...)
                _loaded[name] = importlib.import_module(IMPL_MODULES[name])
            except Exception:  # noqa: BLE001
                _loaded[name] = None
    return _loaded[name]


def available_impls() -> list[str]:
    """Names of the implementations whose modules import on this machine."""
    return [name for name in IMPL_MODULES if _load(name) is not None]


# What the fused Triton kernels decline (``auto`` then takes ``reference``).
FUSED_DECLINES = ("edge_weight",)


def resolve_impl(impl: str, x: Tensor | None = None, *, weighted: bool = False) -> str:
    """Map ``impl`` (``auto`` included) to a concrete implementation name.

    ``auto``: ``fused`` for CUDA ``x`` when Triton imports and the call is unweighted, else
    ``reference``.

    Raises:
        ValueError: unknown name, a known one whose module does not import, or ``fused`` asked
        for a weighted call.
    """
    if impl == "auto":
        if x is not None and x.is_cuda and not weighted and _load("fused") is not None:
            return "fused"
        return "reference"
    if impl == "fused" and weighted:
        raise ValueError(
            "ops impl 'fused' does not support edge_weight (per-edge float weights); "
            "use impl='auto' or 'reference', which do"
        )
    if impl not in IMPL_MODULES:
        choices = ", ".join(["auto", *IMPL_MODULES])
        raise ValueError(f"unknown ops impl {impl!r}; choices: {choices}")
    if _load(impl) is None:
        try:  # re-raise the real import error for a readable message
            importlib.import_module(IMPL_MODULES[impl])
        except Exception as exc:  # noqa: BLE001
            raise ValueError(
                f"ops impl {impl!r} is not available here ({exc}); "
                f"available: {', '.join(available_impls())}"
            ) from exc
    return impl


def get_impl(
    impl: str, x: Tensor | None = None, *, weighted: bool = False
) -> Callable[..., dict[str, Tensor]]:
    """The ``propagate`` function of implementation ``impl``."""
    module = _load(resolve_impl(impl, x, weighted=weighted))
    assert module is not None
    return module.propagate


def check_inputs(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    message: str,
    aggregators: Sequence[str],
    edge_mask: Tensor | None,
    edge_weight: Tensor | None = None,
) -> None:
    """Validate shapes and names; raises ValueError with the offending argument."""
    if x.dim() != 3 or x.shape[0] != graph.num_nodes:
        raise ValueError(f"x must be [N={graph.num_nodes}, B, d], got {tuple(x.shape)}")
    _, batch, dim = x.shape
    r2 = graph.num_relations
    if message == "mul":
        if not isinstance(relation, Tensor):
            raise ValueError("message='mul' needs relation as a tensor [R2, d] or [B, R2, d]")
        ok = (relation.dim() == 2 and tuple(relation.shape) == (r2, dim)) or (
            relation.dim() == 3 and tuple(relation.shape) == (batch, r2, dim)
        )
        if not ok:
            raise ValueError(
                f"relation must be [R2={r2}, d={dim}] or [B={batch}, R2, d], "
                f"got {tuple(relation.shape)}"
            )
    elif message == "basis":
        if not (isinstance(relation, tuple | list) and len(relation) == 2):
            raise ValueError("message='basis' needs relation=(bases [nb, d, d], coef [R2, nb])")
        bases, coef = relation
        nb = bases.shape[0]
        if tuple(bases.shape) != (nb, dim, dim) or tuple(coef.shape) != (r2, nb):
            raise ValueError(
                f"basis relation must be bases [nb, {dim}, {dim}] and coef [{r2}, nb], got "
                f"{tuple(bases.shape)} and {tuple(coef.shape)}"
            )
    else:
        raise ValueError(f"unknown message {message!r}; choices: {', '.join(MESSAGES)}")
    bad = [a for a in aggregators if a not in AGGREGATORS]
    if bad:
        raise ValueError(f"unknown aggregators {bad}; choices: {', '.join(AGGREGATORS)}")
    if edge_mask is not None and (
        edge_mask.dtype != torch.bool or tuple(edge_mask.shape) != (graph.num_edges,)
    ):
        raise ValueError(
            f"edge_mask must be bool [E={graph.num_edges}], got "
            f"{edge_mask.dtype} {tuple(edge_mask.shape)}"
        )
    if edge_weight is not None:
        shape = tuple(edge_weight.shape)
        if not edge_weight.is_floating_point() or shape not in (
            (graph.num_edges,),
            (batch, graph.num_edges),
        ):
            raise ValueError(
                f"edge_weight must be float [E={graph.num_edges}] or [B={batch}, E], got "
                f"{edge_weight.dtype} {shape}"
            )


def propagate(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, Tensor],
    *,
    message: str,
    aggregators: Sequence[str],
    edge_mask: Tensor | None = None,
    edge_weight: Tensor | None = None,
    impl: str = "auto",
    chunk_elements: int = 1 << 24,
) -> dict[str, Tensor]:
    """One round of relational message passing (see the module docstring for the equations).

    Args:
        graph: destination-sorted CSR graph with ``num_relations = R2``.
        x: float [N, B, d] node states of B queries.
        relation: ``mul``: [R2, d] or [B, R2, d]; ``basis``: ``(bases [nb, d, d], coef [R2, nb])``.
        message: ``"mul"`` or ``"basis"``.
        aggregators: subset of ``("sum", "sumsq", "max", "min")``.
        edge_mask: optional bool [E] keep-mask (False = edge removed), shared by the batch.
        edge_weight: optional float [E] (shared) or [B, E] (per query): each kept message is
            multiplied by its weight before the reduction; differentiable.  Not with ``fused``.
        impl: ``auto`` | ``naive`` | ``reference`` | ``fused`` | ``scatter``.
        chunk_elements: at most this many message entries (edges x B x d) per block.

    Returns:
        dict: each requested aggregator -> float [N, B, d]; ``"degree"`` -> float [N].
    """
    weighted = edge_weight is not None
    fn = get_impl(impl, x, weighted=weighted)
    check_inputs(graph, x, relation, message, aggregators, edge_mask, edge_weight)
    extra = {"edge_weight": edge_weight} if weighted else {}
    return fn(
        graph,
        x,
        relation,
        message=message,
        aggregators=tuple(aggregators),
        edge_mask=edge_mask,
        chunk_elements=chunk_elements,
        **extra,
    )


__all__ = [
    "AGGREGATORS",
    "FUSED_DECLINES",
    "IMPL_MODULES",
    "MESSAGES",
    "available_impls",
    "check_inputs",
    "get_impl",
    "propagate",
    "resolve_impl",
]
