"""The commands: every entry point of the package, one module each, each with ``main()``.

=====================================  ==============================================
``python -m cmpnn_dist.train``         :mod:`cmpnn_dist.cli.train` (and ``-m`` sweeps)
``python -m cmpnn_dist.evaluate``      :mod:`cmpnn_dist.cli.evaluate`
``python -m cmpnn_dist.report``        :mod:`cmpnn_dist.cli.report`
``python -m cmpnn_dist.sweep``         :mod:`cmpnn_dist.cli.sweep`
``python -m cmpnn_dist.predict``       :mod:`cmpnn_dist.cli.predict`
``python -m cmpnn_dist.predict.batch`` :mod:`cmpnn_dist.cli.batch` (a Ray job)
``python -m cmpnn_dist.serve``         :mod:`cmpnn_dist.cli.serve`
``python -m cmpnn_dist.convert``       :mod:`cmpnn_dist.cli.convert`
``python -m cmpnn_dist.storage``       :mod:`cmpnn_dist.cli.storage`
``python -m cmpnn_dist.wl``            :mod:`cmpnn_dist.cli.wl`
=====================================  ==============================================

The ``-m`` names are aliases (``cmpnn_dist/train.py``, ``cmpnn_dist/predict/__main__.py``...)
of four lines that import ``main`` from here; no library module imports this package
(``tests/repo/test_imports.py``).  :mod:`cmpnn_dist.cli.common` is the shared plumbing (compose a
config, ``--help``, map a ``UsageError`` to ``error:`` and exit status 2).  Importing this
package sets the OpenMP defaults before torch loads (:mod:`cmpnn_dist.openmp_env`).
"""

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()
