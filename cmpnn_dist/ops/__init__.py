"""Message-passing kernels behind one interface: :func:`propagate`.

For a destination-sorted :class:`~cmpnn_dist.graph.Graph`, node states ``x`` of B queries and
relation parameters, every edge ``e = (src_e -rel_e-> dst_e)`` that the keep-mask retains
sends a message ``m_e`` and the messages arriving at each node are reduced::

    m_e[b] = f(x[src_e, b], P[rel_e])         f = the message function named by ``message=``

    out["sum"][v]   = sum_{e -> v} m_e          out["sumsq"][v] = sum_{e -> v} m_e ** 2
    out["max"][v]   = max_{e -> v} m_e          out["min"][v]   = min_{e -> v} m_e
    out["degree"][v] = #{e -> v kept}           (float [N])

Message functions are a registry (:mod:`cmpnn_dist.ops.messages`: ``message_names()``,
``register_message``); each declares ``compute(x_src [n, B, d], rel [n], params)`` and a shape
check of its relation parameters.  Built in::

    message="mul":    m_e[b] = x[src_e, b] * relation[.., rel_e, :]
                      relation float [R2, d] (shared by the batch, MSG 2) or [B, R2, d] (MSG 1)
    message="basis":  m_e[b] = W_{rel_e} x[src_e, b],  W_r = sum_k coef[r, k] * bases[k]
                      relation = (bases float [nb, d, d], coef float [R2, nb]);
                      (W_r x)[j] = sum_i W_r[j, i] x[i]

and ``cmpnn_dist.model.messages`` registers ``transe`` (x + r) and ``rotate`` when imported.

With ``edge_weight`` (float [E] shared by the batch, or [B, E] per query) every kept message
is scaled before the reduction, ``m_e[b] <- w_e m_e[b]`` (or ``w[b, e] m_e[b]``), and every
statistic (sum, sumsq, max, min) is taken over the scaled messages; ``degree`` still counts
kept edges.  Outputs are differentiable in the weights (gradient-based path explanations, as
in NBFNet).  A zero weight therefore removes an edge from ``sum`` / ``sumsq`` exactly, but
for ``max`` / ``min`` it is a message of value 0 and it still counts in ``degree``: remove
edges with ``edge_mask``.  Weights of exactly 1 give bit for bit the unweighted result.

Each aggregator output is float [N, B, d]; a node without a kept in-edge gets 0 everywhere.
Gradients of ``max`` / ``min`` are shared evenly between the edges that attain the extreme
(naive, reference, generic, scatter); ``fused`` and ``cpu`` pass all of it to the first such
edge (smallest edge id, as ``torch.max(dim)`` picks one index).  Both are subgradients; they differ
only on exact ties, which random float32 inputs do produce now and then on large graphs.
bfloat16 / float16 inputs give outputs and gradients of the input dtype; ``reference``,
``generic``, ``fused`` and ``cpu`` accumulate in float32 (``reference`` / ``generic`` compute
in float32 and round once), ``naive`` and ``scatter`` compute in the input dtype.

Implementations (``impl=``) and what they cover:

* ``naive``     -- :mod:`cmpnn_dist.ops.naive`: materialises all |E| x B x d messages; the
  oracle.  Every message, weights.
* ``generic``   -- :mod:`cmpnn_dist.ops.generic`: chunked gather-then-reduce with autograd
  through the message function per piece (bounded memory).  Every message, weights.
* ``reference`` -- :mod:`cmpnn_dist.ops.vectorized`: the same chunked engine with hand-written
  kernels for ``mul`` and ``basis`` (``FAST_MESSAGES``); other messages go through
  ``generic``'s kernel.  Every message, weights.
* ``fused``     -- ``cmpnn_dist.ops.triton_mp`` (Triton; CUDA), imported lazily.  ``mul`` and
  ``basis`` only, no weights.
* ``scatter``   -- ``cmpnn_dist.ops.scatter`` (torch-scatter), imported lazily.  Every
  message, weights.
* ``cpu``       -- :mod:`cmpnn_dist.ops.cpu`: compiled C++ gather-reduce kernel, built on
  first use against the installed torch (:mod:`cmpnn_dist.ops.cpu_build`).  ``mul`` only,
  weights; CPU tensors.
* ``auto``      -- ``fused`` for CUDA inputs when it imports and covers the call; ``cpu`` for
  CPU inputs when it builds and covers the call; else ``reference`` when the message is one
  of its ``FAST_MESSAGES``; else ``generic``.

What each covers is declared in :data:`COVERAGE`.  An explicit impl that does not cover the
call (``fused`` with ``transe``, or with ``edge_weight``) raises ValueError naming what it
covers.  Every implementation module exposes ``propagate(graph, x, relation, *, message,
aggregators, edge_mask=None, edge_weight=None, **kwargs)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from types import ModuleType

import torch
from torch import Tensor

from cmpnn_dist.graph import Graph
from cmpnn_dist.ops.messages import (
    EdgeMessage,
    as_params,
    get_message,
    message_names,
    register_message,
)
from cmpnn_dist.ops.reductions import AGGREGATORS

IMPL_MODULES: dict[str, str] = {
    "naive": "cmpnn_dist.ops.naive",
    "reference": "cmpnn_dist.ops.vectorized",
    "generic": "cmpnn_dist.ops.generic",
    "fused": "cmpnn_dist.ops.triton_mp",
    "scatter": "cmpnn_dist.ops.scatter",
    "cpu": "cmpnn_dist.ops.cpu",  # compiled on first use; absent when that fails (cpu_build)
}
ALWAYS = ("naive", "reference", "generic")  # plain torch: always importable

_loaded: dict[str, ModuleType | None] = {}


def _load(name: str) -> ModuleType | None:
    """Import the module of implementation ``name``; None when it does not import."""
    if name not in _loaded:
        if name in ALWAYS:  # always present; let real bugs surface
            _loaded[name] = importlib.import_module(IMPL_MODULES[name])
        else:
            try:  # optional back ends may fail with more than ImportError (no CUDA, ...)
                _loaded[name] = importlib.import_module(IMPL_MODULES[name])
            except Exception:  # noqa: BLE001
                _loaded[name] = None
    return _loaded[name]


def compiled_cpu() -> ModuleType | None:
    """:mod:`cmpnn_dist.ops.cpu` (the compiled CPU kernel, also pruned propagation's
    selection) when it builds and loads here, else None."""
    return _load("cpu")


def available_impls() -> list[str]:
    """Names of the implementations whose modules import on this machine."""
    return [name for name in IMPL_MODULES if _load(name) is not None]


# What each implementation covers, declared here so that the answer does not depend on
# whether its module imports: (message names it has code for, None = every registered
# message; whether it takes edge_weight).
COVERAGE: dict[str, tuple[tuple[str, ...] | None, bool]] = {
    "naive": (None, True),
    "reference": (None, True),  # mul / basis by hand (FAST_MESSAGES), others generic
    "generic": (None, True),
    "fused": (("mul", "basis"), False),
    "scatter": (None, True),
    "cpu": (("mul",), True),
}


def covers(impl: str, message: str | EdgeMessage = "mul", weighted: bool = False) -> bool:
    """Whether implementation ``impl`` handles ``message`` (with weights when ``weighted``);
    says nothing about whether its module imports here."""
    names, weights = COVERAGE[impl]
    if names is not None and not (isinstance(message, str) and message in names):
        return False  # specialised code covers registered names only
    return weights or not weighted


def resolve_impl(
    impl: str,
    x: Tensor | None = None,
    *,
    message: str | EdgeMessage = "mul",
    weighted: bool = False,
) -> str:
    """Map ``impl`` (``auto`` included) to a concrete implementation name.

    ``auto``: ``fused`` for CUDA ``x`` when Triton imports and covers ``message`` unweighted;
    ``cpu`` for CPU ``x`` and ``mul`` when the compiled kernel builds and loads; else
    ``reference`` for its fast messages (``mul``, ``basis``); else ``generic``.

    Raises:
        ValueError: unknown name, a known one whose module does not import, or one that does
        not cover the call (``fused`` with another message or with ``edge_weight``).
    """
    if impl == "auto":
        if x is not None and x.is_cuda and covers("fused", message, weighted):
            if _load("fused") is not None:
                return "fused"
        if x is not None and x.device.type == "cpu" and covers("cpu", message, weighted):
            if _load("cpu") is not None:
                return "cpu"
        if isinstance(message, str) and message in _reference_fast():
            return "reference"
        return "generic"
    if impl not in IMPL_MODULES:
        choices = ", ".join(["auto", *IMPL_MODULES])
        raise ValueError(f"unknown ops impl {impl!r}; choices: {choices}")
    if not covers(impl, message, weighted):
        names, weights = COVERAGE[impl]
        call = f"message {get_message(message).name!r}" + (" with edge_weight" if weighted else "")
        raise ValueError(
            f"ops impl {impl!r} does not support {call}: it covers messages "
            f"{', '.join(names or message_names())} {'with' if weights else 'without'} "
            "edge_weight; use impl='auto', 'reference' or 'generic'"
        )
    if _load(impl) is None:
        try:  # re-raise the real import error for a readable message
            importlib.import_module(IMPL_MODULES[impl])
        except Exception as exc:  # noqa: BLE001
            raise ValueError(
                f"ops impl {impl!r} is not available here ({exc}); "
                f"available: {', '.join(available_impls())}"
            ) from exc
    return impl


def _reference_fast() -> tuple[str, ...]:
    module = _load("reference")
    assert module is not None
    return module.FAST_MESSAGES


def get_impl(
    impl: str,
    x: Tensor | None = None,
    *,
    message: str | EdgeMessage = "mul",
    weighted: bool = False,
) -> Callable[..., dict[str, Tensor]]:
    """The ``propagate`` function of implementation ``impl`` (see :func:`resolve_impl`)."""
    module = _load(resolve_impl(impl, x, message=message, weighted=weighted))
    assert module is not None
    return module.propagate


def check_inputs(
    graph: Graph,
    x: Tensor,
    relation: Tensor | tuple[Tensor, ...],
    message: str | EdgeMessage,
    aggregators: Sequence[str],
    edge_mask: Tensor | None,
    edge_weight: Tensor | None = None,
) -> None:
    """Validate shapes and names; raises ValueError with the offending argument."""
    if x.dim() != 3 or x.shape[0] != graph.num_nodes:
        raise ValueError(f"x must be [N={graph.num_nodes}, B, d], got {tuple(x.shape)}")
    _, batch, dim = x.shape
    get_message(message).check(as_params(relation), graph.num_relations, batch, dim)
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
    relation: Tensor | tuple[Tensor, ...],
    *,
    message: str | EdgeMessage,
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
        relation: the message's parameters: ``mul``: [R2, d] or [B, R2, d]; ``basis``:
            ``(bases [nb, d, d], coef [R2, nb])``; others: see their ``EdgeMessage``.
        message: a registered name (``message_names()``) or an ``EdgeMessage``.
        aggregators: subset of ``("sum", "sumsq", "max", "min")``.
        edge_mask: optional bool [E] keep-mask (False = edge removed), shared by the batch.
        edge_weight: optional float [E] (shared) or [B, E] (per query): each kept message is
            multiplied by its weight before the reduction; differentiable.  Not with ``fused``.
        impl: ``auto`` | ``naive`` | ``reference`` | ``generic`` | ``fused`` | ``scatter`` |
            ``cpu``.
        chunk_elements: at most this many message entries (edges x B x d) per block.

    Returns:
        dict: each requested aggregator -> float [N, B, d]; ``"degree"`` -> float [N].
    """
    x, relation = _autocast_inputs(x, relation)
    weighted = edge_weight is not None
    fn = get_impl(impl, x, message=message, weighted=weighted)
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


def _autocast_inputs(
    x: Tensor, relation: Tensor | tuple[Tensor, ...]
) -> tuple[Tensor, Tensor | tuple[Tensor, ...]]:
    """Under ``torch.autocast`` message passing runs in the autocast dtype, as a matmul would
    (this is how ``train.precision=bf16`` reaches the bfloat16 kernels); otherwise the relation
    parameters take ``x``'s dtype."""
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype

    def cast(t: Tensor) -> Tensor:
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t

    relation = tuple(map(cast, relation)) if isinstance(relation, tuple) else cast(relation)
    return cast(x), relation


__all__ = [
    "AGGREGATORS",
    "COVERAGE",
    "IMPL_MODULES",
    "EdgeMessage",
    "available_impls",
    "compiled_cpu",
    "check_inputs",
    "covers",
    "get_impl",
    "get_message",
    "message_names",
    "propagate",
    "register_message",
    "resolve_impl",
]
