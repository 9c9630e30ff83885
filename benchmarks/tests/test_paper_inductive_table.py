"""The eight-split table's per-split verdict on ``model.prior=relations``: whether the lift holds
and which published models it beats, checked on hand-built cells against hand-computed bars."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.accuracy.paper_inductive_table import error_bars, prior_verdicts, to_markdown, who
from cmpnn_dist.paper import SPLITS, published


def _cell(split: str, variant: str, seed: int, hits: float) -> dict:
    metrics = {"hits@10_50": hits, "mrr": hits / 3}
    return {"split": split, "variant": variant, "seed": seed, "run": f"{variant}/{split}/{seed}",
            "cpus": ["AMD EPYC"], "test": metrics, "facts": metrics}  # fmt: skip


ROWS = [
    _cell("fb237_ind_v1", "basic", 0, 0.76),
    _cell("fb237_ind_v1", "basic", 1, 0.81),
    _cell("fb237_ind_v1", "basic", 2, 0.79),
    _cell("fb237_ind_v1", "prior", 0, 0.837),
    _cell("wn18rr_ind_v1", "basic", 0, 0.930),
    _cell("wn18rr_ind_v1", "basic", 1, 0.934),
    _cell("wn18rr_ind_v4", "basic", 0, 0.870),
    _cell("wn18rr_ind_v4", "prior", 0, 0.800),
    _cell("fb237_ind_v2", "prior", 0, 0.95),  # no basic cell yet: no verdict
]


def test_published_holds_each_paper_row_once_and_the_peer():
    fb = published("fb237_ind_v1")
    # Table 1's 12 rows + readout sum / relation (none is Table 1's PNA row) + INIT 0 / 1 / 3
    # (INIT 2 is Table 1's sum row) + NBFNet
    assert len(fb) == 12 + 2 + 3 + 1
    assert fb["C-MPNN sum / MSG 3 / f(t) = 0 / INIT 2 / no readout"] == 0.850
    assert fb["C-MPNN pna / MSG 1 / f(t) = t / INIT 2 / relation readout"] == 0.835
    assert fb["NBFNet"] == 0.834
    assert all(len(published(s)) == 18 for s in SPLITS)
    assert published("fb15k237") == {}


def test_error_bars_are_the_split_std_or_the_pooled_std():
    bars = error_bars(ROWS)
    fb, wn = statistics.stdev([0.76, 0.81, 0.79]), statistics.stdev([0.930, 0.934])
    assert bars["fb237_ind_v1"] == pytest.approx((fb, "the split's seeds"))
    assert bars["wn18rr_ind_v4"][0] == pytest.approx(((fb**2 + wn**2) / 2) ** 0.5)
    assert bars["wn18rr_ind_v4"][1] == "pooled over fb237_ind_v1, wn18rr_ind_v1"
    assert "fb237_ind_v2" not in bars


def test_the_verdicts_on_hand_built_cells():
    fb, wn4 = prior_verdicts(ROWS)
    bar = statistics.stdev([0.76, 0.81, 0.79])  # 0.0252
    assert fb["split"] == "fb237_ind_v1"
    assert fb["lift"] == pytest.approx(0.837 - 0.78666667)
    assert fb["holds"] == "holds"  # +0.050 > 0.025
    # level with: within 0.025 of 0.837 -> 0.850, 0.844, 0.835 and NBFNet's 0.834
    assert sorted(fb["level_with"].values()) == [0.834, 0.835, 0.844, 0.850]
    assert fb["below"] == {}
    assert len(fb["beats"]) == 18 - 4 and max(fb["beats"].values()) == 0.809
    assert all(0.837 - v > bar for v in fb["beats"].values())

    assert wn4["split"] == "wn18rr_ind_v4" and wn4["holds"] == "does not hold"  # -0.070
    # wn18rr_ind_v4's published figures are 0.654 (INIT 0) ... 0.890 (NBFNet): below 0.800 -
    # bar only INIT 0 (0.654)
    assert wn4["beats"] == {"C-MPNN sum / MSG 1 / f(t) = t / INIT 0 / no readout": 0.654}


def test_who_names_peers_and_counts_the_papers_rows():
    fb, _ = prior_verdicts(ROWS)
    assert who(fb["level_with"]) == (
        "NBFNet (0.834); 3 of the paper's rows (highest: sum / MSG 3 / f(t) = 0 / INIT 2 / "
        "no readout, 0.850)"
    )
    assert who({}) == "none"


def test_the_markdown_carries_the_verdicts_and_the_todo():
    text = to_markdown(ROWS, ["graIL8_prior/data=wn18rr_ind_v1"], "idle")
    fb = "| fb237_ind_v1 | 0.787 (3) | 0.837 (1) | +0.050 | 0.025 (the split's seeds) | holds |"
    assert fb in text
    assert "| wn18rr_ind_v4 | 0.870 (1) | 0.800 (1) | -0.070 |" in text
    assert "Not finished yet (1 cells): graIL8_prior/data=wn18rr_ind_v1" in text
    assert "no split has both variants" in to_markdown(ROWS[:3], [], "idle")
