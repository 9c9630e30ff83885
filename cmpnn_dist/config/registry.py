"""The schema's plugin registries: choice values and config rules added by the layers below.

("Below" as in the table of ``docs/design.md``: the layers that import the config.)  Two
registries, each filled by registration from the layer that owns the entries, so this package
imports none of them:

* **choices** (:func:`register_choice`, read by :func:`allowed_values`): values a choice field
  accepts beyond its ``Literal`` -- each registered dataset source, message function,
  aggregation and evaluation protocol adds its name;
* **checks** (:func:`register_check`, read by :func:`registered_checks`): rules that
  :func:`cmpnn_dist.config.validate` runs after the field checks (each message function's own
  ``check_config``: rotate needs an even ``model.hidden_dim``).

Each registry knows, as dotted module names (:data:`CHOICE_PLUGINS`, :data:`CHECK_PLUGINS`),
the packages that register into it, and imports them with :mod:`importlib` the first time it is
asked (a lookup, a listing, hence ``validate()`` and ``--help``): a config validates the same in
a fresh process that imported nothing else, whatever the caller imported first.  Registering
never loads (the plugins register while they load).  Finding a plugin by its name is discovery,
not a dependency: the import graph (``tests/helpers/imports.py``) keeps this package in the
base layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cmpnn_dist.config.schema import Config

Check = Callable[["Config"], None]

# dotted choice key -> the packages whose import registers its values (each package imports
# every module of its folder, so a new source / message / aggregation / protocol file counts)
CHOICE_PLUGINS: dict[str, tuple[str, ...]] = {
    "data.source": ("cmpnn_dist.convert.sources",),
    "model.message": ("cmpnn_dist.model.messages",),
    "model.aggregate": ("cmpnn_dist.model.aggregations",),
    "eval.protocol": ("cmpnn_dist.evaluation.protocols",),
}
# the packages whose import registers config rules (the message functions' check_config)
CHECK_PLUGINS: tuple[str, ...] = ("cmpnn_dist.model.messages",)

_REGISTERED_CHOICES: dict[str, list[Any]] = {}
_REGISTERED_CHECKS: list[Check] = []
_LOADED: set[str] = set()  # plugin modules imported (or being imported) by load_plugins


def load_plugins(modules: Iterable[str]) -> None:
    """Import each of ``modules`` (dotted names) once, so its registrations have run.  A module
    is marked before its import, so a plugin that asks a registry while loading does not load
    itself again; an import that fails is unmarked and raises (the next ask tries again)."""
    for name in modules:
        if name in _LOADED:
            continue
        _LOADED.add(name)
        try:
            importlib.import_module(name)
        except BaseException:
            _LOADED.discard(name)
            raise


def register_choice(key: str, value: Any) -> None:
    """Accept ``value`` for the choice field ``key`` (dotted, e.g. ``model.aggregate``) beyond
    its ``Literal``: the registries of the layers below (message functions, aggregations,
    evaluation protocols, dataset sources) call this for each entry they register, so a new
    entry is one file and the schema imports none of them.  Idempotent."""
    values = _REGISTERED_CHOICES.setdefault(key, [])
    if value not in values:
        values.append(value)


def allowed_values(key: str, meta: Any) -> tuple[Any, ...]:
    """The values choice field ``key`` accepts (``meta``: the field's metadata, from
    :func:`~cmpnn_dist.config.options.option`): its ``Literal``'s, then registered ones (the
    key's plugins loaded first, :data:`CHOICE_PLUGINS`)."""
    load_plugins(CHOICE_PLUGINS.get(key, ()))
    extra = [v for v in _REGISTERED_CHOICES.get(key, ()) if v not in meta["choices"]]
    return (*meta["choices"], *extra)


def register_check(check: Check) -> Check:
    """Add a rule that :func:`cmpnn_dist.config.validate` runs after the field checks.  The
    model's message registry adds each message function's own ``check_config`` this way (rotate
    needs an even ``model.hidden_dim``); ``check`` raises ValueError (or ConfigError) naming the
    key.  Idempotent: registering the same function twice keeps one."""
    if check not in _REGISTERED_CHECKS:
        _REGISTERED_CHECKS.append(check)
    return check


def registered_checks() -> list[Check]:
    """The registered rules, in registration order (:data:`CHECK_PLUGINS` loaded first)."""
    load_plugins(CHECK_PLUGINS)
    return list(_REGISTERED_CHECKS)
