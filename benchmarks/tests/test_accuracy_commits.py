"""``benchmarks/accuracy/accuracy_commits.py``'s statistics and header, on hand-computed examples.

The comparison itself (two worktrees, ten 20-epoch cells) is a benchmark; what it reports is
checked here: Welch's t on the seed means and the command its results header records.
"""

from __future__ import annotations

import math

from benchmarks.accuracy.accuracy_commits import recorded_command, summarise, welch_t


def test_welch_t_on_a_hand_computed_example():
    # means 2 and 4, sample variances 1 and 4, three values a side:
    # t = (4 - 2) / sqrt(1/3 + 4/3) = 2 / sqrt(5/3)
    assert math.isclose(welch_t([1, 2, 3], [2, 4, 6]), 2 / math.sqrt(5 / 3))
    assert math.isclose(welch_t([2, 4, 6], [1, 2, 3]), -2 / math.sqrt(5 / 3))
    assert math.isnan(welch_t([1.0], [1.0, 2.0]))  # one value has no spread
    assert welch_t([1.0, 1.0], [2.0, 2.0]) == math.inf  # no spread at all, a difference


def test_summary_keeps_each_commits_values_and_the_rule_columns_only():
    rows = {
        "a": [{"seed": 0, "mrr": 0.2, "hits@10_50_paper": 0.7, "hits@10_50_rule_as_run": "x",
               "hits@10_50_as_run": 0.7},
              {"seed": 1, "mrr": 0.3, "hits@10_50_paper": None}],
        "b": [{"seed": 0, "mrr": 0.25}, {"seed": 1, "mrr": 0.35}],
    }  # fmt: skip
    out = summarise(rows, ["a", "b"])
    assert sorted(out) == ["hits@10_50_paper", "mrr"]
    assert out["mrr"]["a"]["values"] == [0.2, 0.3]
    assert math.isclose(out["mrr"]["b"]["mean"], 0.3)
    assert math.isclose(out["mrr"]["welch_t"], 0.05 / math.sqrt(0.005 / 2 + 0.005 / 2))
    assert out["hits@10_50_paper"]["a"]["values"] == [0.7]  # a missing value is not a zero
    assert out["hits@10_50_paper"]["b"]["mean"] is None


def test_the_recorded_command_reruns_the_cells():
    argv = ["--commits", "main", "HEAD", "--collect", "--reading", "no loss",
            "--load", "two cells at a time", "--reading=again"]  # fmt: skip
    assert recorded_command(argv) == (
        "python -m benchmarks.accuracy.accuracy_commits --commits main HEAD "
        "--load 'two cells at a time'"
    )
