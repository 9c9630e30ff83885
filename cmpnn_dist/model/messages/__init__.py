"""MSG_r^(t): the registry of message functions (paper section 4.1, NBFNet's message functions).

``model.message`` accepts any value of :func:`choices`: the paper's numbers 1, 2, 3 and the
registered names:

    1 | query_mul      h * W_r z_q                     (ops message ``mul``)
    2 | relation_mul   h * b_r                         (ops message ``mul``)
    3 | linear         W_r h, basis decomposition      (ops message ``basis``)
    transe             h + W_r z_q                     (ops message ``transe``)
    rotate             h o exp(i W_r z_q), d even      (ops message ``rotate``)

Each lives in one module of this package (``mul.py``, ``linear.py``, ``transe.py``,
``rotate.py``), which registers its relation parameterisation here (:func:`register`) and, when
new, its per-edge computation with :mod:`cmpnn_dist.ops.messages`.  Every module of this
package is imported below, so a new message function is one new file (``docs/extending.md``).
See :mod:`.base` for the protocol.
"""

import importlib
import pkgutil

from cmpnn_dist.model.messages.base import (
    MessageFunction,
    build,
    choices,
    names,
    register,
    resolve,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MessageFunction", "build", "choices", "names", "register", "resolve"]
