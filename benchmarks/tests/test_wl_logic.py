"""``benchmarks/wl/wl_logic.py`` in small: the expressivity claims of docs/wl.md learned, not only
computed (``tests/unit/wl/test_wl_logic.py`` checks the formulas and graphs themselves)."""

from __future__ import annotations

import pytest

from benchmarks.wl import wl_logic


@pytest.mark.slow
def test_training_separates_the_families() -> None:
    """benchmarks/wl/wl_logic.py in small: a C-MPNN fits a composition rule, an R-MPNN stays at
    chance on the regular graph; the readout formula needs the global readout."""
    assert wl_logic.run("cmpnn", "compose", 0, 200, 1e-3)["test_balanced_accuracy"] > 0.95
    assert wl_logic.run("rmpnn", "compose", 0, 200, 1e-3)["test_balanced_accuracy"] < 0.55
    no = wl_logic.run("cmpnn", "count2_non_neighbours", 1, 400, 1e-3)
    ro = wl_logic.run("cmpnn_readout", "count2_non_neighbours", 1, 400, 1e-3)
    assert no["train_balanced_accuracy"] < 0.7 < 0.95 < ro["train_balanced_accuracy"]
