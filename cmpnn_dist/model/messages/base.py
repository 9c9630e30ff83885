"""The message-function protocol of the model and its registry.

A message function MSG_r(h_w, z_q) is two things:

* its per-edge computation, an :class:`~cmpnn_dist.ops.messages.EdgeMessage` registered with
  the ops layer under ``edge_message`` (``compute(x[src], rel, params)``, run by every
  ``ops.propagate`` impl that covers it, and by the generic path for any of them);
* its relation parameterisation, this ``nn.Module``: ``relations(z_q [B, d])`` returns the
  relation parameters of one layer for a batch of queries, in the layout the edge message
  expects (e.g. [B, R2, d] computed from z_q, or a shared [R2, d] table).

Subclasses declare ``name`` (the ``model.message`` value), optionally ``number`` (the paper's
MSG number, also accepted as ``model.message``), ``edge_message`` and ``formula``, and are
added with :func:`register`.  A new message function is one file in this package.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from cmpnn_dist.config import Config, ModelConfig, register_check, register_choice

Relation = Tensor | tuple[Tensor, ...]


class MessageFunction(nn.Module):
    """Relation parameters of one layer for the message function ``name``.

    Args (every subclass): ``num_relations`` R2 (inverses included), ``dim`` d, ``cfg`` the
    model config (for options such as ``num_bases``).
    """

    name: ClassVar[str]
    number: ClassVar[int | None] = None
    edge_message: ClassVar[str]
    formula: ClassVar[str] = ""

    def __init__(self, num_relations: int, dim: int, cfg: ModelConfig):
        super().__init__()
        self.num_relations, self.dim = int(num_relations), int(dim)

    @classmethod
    def check_config(cls, cfg: ModelConfig) -> None:
        """Raise ValueError naming the ``model.*`` key this message cannot work with."""

    def relations(self, z_q: Tensor) -> Relation:
        """Relation parameters for ``ops.propagate`` given z_q float [B, d]."""
        raise NotImplementedError

    def forward(self, z_q: Tensor) -> tuple[str, Relation]:
        """Returns ``(edge_message, relation)``: the ``message=`` and ``relation`` arguments
        of :func:`cmpnn_dist.ops.propagate`."""
        return self.edge_message, self.relations(z_q)

    def pack(self, relation: Relation, batch: int) -> Relation:
        """The relation parameters of ``batch`` queries as one shared table over the packed
        relations ``b * R2 + r`` of a packed subgraph (pruned propagation, whose B queries'
        subgraphs form one graph of batch 1): per query ``[B, R2, X]`` -> ``[B R2, X]``,
        shared ``[R2, X]`` -> repeated ``[B R2, X]``, for each tensor of a tuple.  A message
        with another layout overrides this.  Raises ValueError for a shape it does not know."""
        r2 = self.num_relations
        parts = relation if isinstance(relation, tuple) else (relation,)
        out = []
        for t in parts:
            if t.dim() == 3 and t.shape[:2] == (batch, r2):
                out.append(t.reshape(batch * r2, t.shape[-1]))
            elif t.dim() == 2 and t.shape[0] == r2:
                out.append(t.repeat(batch, 1))
            else:
                raise ValueError(
                    f"pruned propagation cannot pack message {self.name!r}'s relation "
                    f"parameters of shape {tuple(t.shape)} (expects [B, R2, X] or [R2, X])"
                )
        return tuple(out) if isinstance(relation, tuple) else out[0]


_REGISTRY: dict[str, type[MessageFunction]] = {}
_NUMBERS: dict[int, str] = {}


def register(cls: type[MessageFunction]) -> type[MessageFunction]:
    """Class decorator: make ``cls`` selectable as ``model.message: <cls.name>`` (and
    ``<cls.number>`` when it has one)."""
    _REGISTRY[cls.name] = cls
    register_choice("model.message", cls.name)
    if cls.number is not None:
        _NUMBERS[cls.number] = cls.name
    return cls


def names() -> list[str]:
    """Canonical names of the registered message functions: the paper's MSG 1, 2, 3 in
    order, then the others alphabetically."""
    numbered = [_NUMBERS[k] for k in sorted(_NUMBERS)]
    return numbered + sorted(n for n in _REGISTRY if n not in numbered)


def choices() -> list[int | str]:
    """Every accepted ``model.message`` value: the paper's MSG numbers, then the names."""
    return [*sorted(_NUMBERS), *names()]


def resolve(key: int | str) -> type[MessageFunction]:
    """The message function for a ``model.message`` value (a number, its digits, or a name).

    Raises:
        ValueError: ``model.message=<key> is not one of [...]``.
    """
    name = key
    if isinstance(key, bool):
        name = None
    elif isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
        name = _NUMBERS.get(int(key))
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"model.message={key!r} is not one of {choices()}")
    return _REGISTRY[name]


def build(key: int | str, num_relations: int, dim: int, cfg: ModelConfig) -> MessageFunction:
    """An instance of the message function ``key`` for one layer (config checked first)."""
    cls = resolve(key)
    cls.check_config(cfg)
    return cls(num_relations, dim, cfg)


@register_check
def check_message_config(cfg: Config) -> None:
    """The chosen message function's own config rules (``check_config``), run by
    :func:`cmpnn_dist.config.validate` (which imports this registry when first asked,
    ``cmpnn_dist.config.registry.CHECK_PLUGINS``); ValueError naming the
    key (an unknown ``model.message`` is caught earlier by the schema's ``Literal``)."""
    if cfg.model.family == "cmpnn":
        resolve(cfg.model.message).check_config(cfg.model)
