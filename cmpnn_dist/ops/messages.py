"""Per-edge message functions: the registry behind ``propagate(..., message=NAME)``.

A message function computes, for a piece of edges at once, ``m_e = f(x[src_e], P[rel_e])``
from the gathered source states and the relation parameters ``P`` (a tuple of tensors):

    prepare(params) -> prepared              once per call, differentiable (default: identity)
    compute(x_src float [n, B, d], rel int64 [n], prepared) -> float [n, B, d]

in plain differentiable torch.  That is all the generic gather-then-reduce path
(:mod:`cmpnn_dist.ops.generic`) and the oracle (:mod:`cmpnn_dist.ops.naive`) need: the generic
path reduces the pieces' messages and gets their gradients by autograd through ``compute``
(and through ``prepare`` by ordinary autograd, outside the pieces).  ``prepare`` is where
per-relation work goes that should not be repeated per edge (a relation-major table layout,
cos / sin of phases, a basis combination).  Fast paths declare by name which messages they
have specialised code for (``ops.COVERAGE``).

Built in here (the fast paths specialise them):

    mul:    m_e[b] = x[src_e, b] * w[.., rel_e, :]       params (w [R2, d] or [B, R2, d],)
    basis:  m_e[b] = W_{rel_e} x[src_e, b],  W_r = sum_k coef[r, k] bases[k]
            params (bases [nb, d, d], coef [R2, nb]);  (W_r x)[j] = sum_i W_r[j, i] x[i]

Others register themselves on import (the model's ``cmpnn_dist.model.messages`` package adds
``transe`` and ``rotate``): ``register_message(EdgeMessage(name, compute, check, ...))``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

Params = tuple[Tensor, ...]


@dataclass(frozen=True)
class EdgeMessage:
    """One per-edge message function.

    Attributes:
        name: the ``message=`` value that selects it.
        compute: ``(x_src [n, B, d], rel [n], prepared) -> [n, B, d]``, differentiable torch.
        check: ``(params, R2, B, d) -> None``; raises ValueError naming what is wrong.
        formula: one line for docs and error messages.
        prepare: ``params -> prepared``, once per call (None: identity).
    """

    name: str
    compute: Callable[[Tensor, Tensor, Params], Tensor]
    check: Callable[[Params, int, int, int], None]
    formula: str = ""
    prepare: Callable[[Params], Params] | None = None

    def prepared(self, params: Params) -> Params:
        """``prepare(params)``, or ``params`` when the message has no preparation."""
        return self.prepare(params) if self.prepare is not None else params

    def messages(self, x_src: Tensor, rel: Tensor, params: Params) -> Tensor:
        """``compute(x_src, rel, prepare(params))``: the messages of a set of edges."""
        return self.compute(x_src, rel, self.prepared(params))


_REGISTRY: dict[str, EdgeMessage] = {}


def register_message(message: EdgeMessage) -> EdgeMessage:
    """Add ``message`` to the registry (a second registration of a name replaces the first)."""
    _REGISTRY[message.name] = message
    return message


def message_names() -> list[str]:
    """Names of the registered per-edge message functions."""
    return list(_REGISTRY)


def get_message(message: str | EdgeMessage) -> EdgeMessage:
    """The registered function ``message`` (an :class:`EdgeMessage` is returned as is)."""
    if isinstance(message, EdgeMessage):
        return message
    if message not in _REGISTRY:
        raise ValueError(
            f"unknown message {message!r}; registered: {', '.join(_REGISTRY)} "
            "(model message functions register when cmpnn_dist.model is imported)"
        )
    return _REGISTRY[message]


def as_params(relation: Tensor | tuple[Tensor, ...] | list[Tensor]) -> Params:
    """``relation`` as a tuple of tensors (a single tensor is a 1-tuple)."""
    return tuple(relation) if isinstance(relation, tuple | list) else (relation,)


# ---------------------------------------------------------------- helpers for vector relations
def relation_major(table: Tensor) -> Tensor:
    """A per-relation vector table [R2, k] (shared) or [B, R2, k] (per query) as [R2, 1, k] /
    [R2, B, k] (a ``prepare`` step), so a piece's rows are one ``index_select``."""
    return table.unsqueeze(1) if table.dim() == 2 else table.transpose(0, 1)


def relation_rows(prepared: Tensor, rel: Tensor) -> Tensor:
    """Rows ``rel`` [n] of a :func:`relation_major` table: [n, B or 1, k], broadcasting
    against ``x_src`` [n, B, d].  (Advanced indexing, whose backward accumulates in the
    table's dtype: the naive oracle's bfloat16 gradients stay those of the obvious code.)"""
    return prepared[rel]


def prepare_vector(params: Params) -> Params:
    """``prepare`` of messages with one vector table: :func:`relation_major`."""
    return (relation_major(params[0]),)


def check_vector_relation(name: str, params: Params, r2: int, batch: int, width: int) -> None:
    """One tensor [R2, width] (shared by the batch) or [B, R2, width] (one per query)."""
    if len(params) != 1:
        raise ValueError(f"message={name!r} needs relation as one tensor, got {len(params)}")
    (w,) = params
    shape = tuple(w.shape)
    if shape not in ((r2, width), (batch, r2, width)):
        raise ValueError(
            f"relation must be [R2={r2}, {width}] or [B={batch}, R2, {width}] for "
            f"message={name!r}, got {shape}"
        )


# ---------------------------------------------------------------- built-ins
def _mul(x_src: Tensor, rel: Tensor, prepared: Params) -> Tensor:
    return x_src * relation_rows(prepared[0], rel)


def _check_mul(params: Params, r2: int, batch: int, dim: int) -> None:
    check_vector_relation("mul", params, r2, batch, dim)


def basis_weights(bases: Tensor, coef: Tensor) -> Tensor:
    """W = einsum(coef, bases) [R2, d, d]; skipped when coef is a fixed identity (full W_r)."""
    r2, nb = coef.shape
    if r2 == nb and not coef.requires_grad and torch.equal(coef, torch.eye(r2).to(coef)):
        return bases
    return torch.einsum("rk,kij->rij", coef, bases)


def _prepare_basis(params: Params) -> Params:
    return (basis_weights(*params),)


def _basis(x_src: Tensor, rel: Tensor, prepared: Params) -> Tensor:
    weights = torch.index_select(prepared[0], 0, rel)  # [n, d, d]
    return torch.bmm(x_src, weights.transpose(1, 2))  # m[e, b, i] = sum_j W[e, i, j] x[e, b, j]


def _check_basis(params: Params, r2: int, batch: int, dim: int) -> None:
    if len(params) != 2:
        raise ValueError("message='basis' needs relation=(bases [nb, d, d], coef [R2, nb])")
    bases, coef = params
    nb = bases.shape[0]
    if tuple(bases.shape) != (nb, dim, dim) or tuple(coef.shape) != (r2, nb):
        raise ValueError(
            f"basis relation must be bases [nb, {dim}, {dim}] and coef [{r2}, nb], got "
            f"{tuple(bases.shape)} and {tuple(coef.shape)}"
        )


register_message(EdgeMessage("mul", _mul, _check_mul, "m = x[src] * w[rel]", prepare_vector))
register_message(
    EdgeMessage(
        "basis",
        _basis,
        _check_basis,
        "m = W[rel] x[src], W_r = sum_k coef[r,k] V_k",
        _prepare_basis,
    )
)

__all__ = [
    "EdgeMessage",
    "Params",
    "as_params",
    "basis_weights",
    "check_vector_relation",
    "get_message",
    "message_names",
    "prepare_vector",
    "register_message",
    "relation_major",
    "relation_rows",
]
