"""Per-edge message functions: the registry behind ``propagate(..., message=NAME)``.

A message function computes, for a piece of edges at once, ``m_e = f(x[src_e], P[rel_e])``
from the gathered source states and the relation parameters ``P`` (a tuple of tensors):

    compute(x_src float [n, B, d], rel int64 [n], params tuple) -> float [n, B, d]

in plain differentiable torch.  That is all the generic gather-then-reduce path
(:mod:`cmpnn_dist.ops.generic`) and the oracle (:mod:`cmpnn_dist.ops.naive`) need: the generic
path reduces the pieces' messages and gets their gradients by autograd through ``compute``.
Fast paths declare by name which messages they have specialised code for (``FAST_MESSAGES``
in :mod:`cmpnn_dist.ops.reference` and :mod:`cmpnn_dist.ops.triton_mp`).

Built in here (the fast paths specialise them):

    mul:    m_e[b] = x[src_e, b] * w[.., rel_e, :]       params (w [R2, d] or [B, R2, d],)
    basis:  m_e[b] = W_{rel_e} x[src_e, b],  W_r = sum_k coef[r, k] bases[k]
            params (bases [nb, d, d], coef [R2, nb]);  (W_r x)[j] = sum_i W_r[j, i] x[i]

Others register themselves on import (the model's ``cmpnn_dist.model.messages`` package adds
``transe`` and ``rotate``): ``register_message(EdgeMessage(name, compute, check, formula))``.
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
        compute: ``(x_src [n, B, d], rel [n], params) -> [n, B, d]``, differentiable torch.
        check: ``(params, R2, B, d) -> None``; raises ValueError naming what is wrong.
        formula: one line for docs and error messages.
    """

    name: str
    compute: Callable[[Tensor, Tensor, Params], Tensor]
    check: Callable[[Params, int, int, int], None]
    formula: str = ""


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
def relation_rows(table: Tensor, rel: Tensor) -> Tensor:
    """Rows of a per-relation vector table for a piece of edges, ready to broadcast against
    ``x_src`` [n, B, d]: ``table`` [R2, k] -> [n, 1, k]; [B, R2, k] -> [n, B, k]."""
    if table.dim() == 2:
        return table[rel].unsqueeze(1)
    return table[:, rel, :].transpose(0, 1)


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
def _mul(x_src: Tensor, rel: Tensor, params: Params) -> Tensor:
    return x_src * relation_rows(params[0], rel)


def _check_mul(params: Params, r2: int, batch: int, dim: int) -> None:
    check_vector_relation("mul", params, r2, batch, dim)


def basis_weights(bases: Tensor, coef: Tensor) -> Tensor:
    """W = einsum(coef, bases) [R2, d, d]; skipped when coef is a fixed identity (full W_r)."""
    r2, nb = coef.shape
    if r2 == nb and not coef.requires_grad and torch.equal(coef, torch.eye(r2).to(coef)):
        return bases
    return torch.einsum("rk,kij->rij", coef, bases)


def _basis(x_src: Tensor, rel: Tensor, params: Params) -> Tensor:
    weights = torch.einsum("rk,kij->rij", params[1], params[0])
    return torch.einsum("eij,ebj->ebi", weights[rel], x_src)


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


register_message(EdgeMessage("mul", _mul, _check_mul, "m = x[src] * w[rel]"))
register_message(
    EdgeMessage("basis", _basis, _check_basis, "m = W[rel] x[src], W_r = sum_k coef[r,k] V_k")
)

__all__ = [
    "EdgeMessage",
    "Params",
    "as_params",
    "basis_weights",
    "check_vector_relation",
    "get_message",
    "message_names",
    "register_message",
    "relation_rows",
]
