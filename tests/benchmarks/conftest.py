"""The benchmark scripts under test: ``benchmarks/`` is a folder of scripts that import one
another by module name, so this folder's tests (and only these) see it on ``sys.path``."""

from __future__ import annotations

import sys

from tests.helpers.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
