"""The run's builders: learning-rate schedules (hand-computed values, exact resume), bf16
autocast reaching message passing, ``eval.splits`` deciding what is ranked."""

from __future__ import annotations

import math

import pytest
import torch

from cmpnn_dist.ops import propagate
from cmpnn_dist.training.builders import build_loss, build_lr_scheduler, lr_factor
from cmpnn_dist.training.loop import fit
from tests.helpers.graphs import hub_graph
from tests.helpers.training import (
    Crash,
    assert_same_weights,
    crash_at,
    rule_kg,
    small_cfg,
    train_rows,
)


@pytest.fixture(scope="module")
def data():
    return rule_kg(32)


def test_lr_factor_by_hand():
    assert [lr_factor(s, 10, "constant", 0) for s in (0, 5, 9)] == [1.0, 1.0, 1.0]
    # warmup 4: 1/4, 2/4, 3/4, 4/4, then the decay over the 6 remaining steps
    assert [lr_factor(s, 10, "linear", 4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert lr_factor(7, 10, "linear", 4) == pytest.approx(1 - 3 / 6)
    assert lr_factor(10, 10, "linear", 4) == 0.0
    assert lr_factor(5, 10, "cosine", 0) == pytest.approx(0.5)
    assert lr_factor(2, 8, "cosine", 0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def test_scheduler_drives_the_optimizer_lr():
    cfg = small_cfg(lr=0.1, lr_schedule="linear", warmup_steps=2)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = build_lr_scheduler(cfg, opt, total_steps=6)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.05, 0.1, 0.1, 0.075, 0.05, 0.025])


def test_scheduled_run_resumes_bit_identically(data, tmp_path):
    """The schedule's state is in the checkpoint: a crash and resume reproduces the run."""
    cfg = dict(lr_schedule="cosine", warmup_steps=3)
    ref = fit(small_cfg(**cfg), data, run_dir=tmp_path / "ref")
    lrs = [r["lr"] for r in ref.history if r["kind"] == "train"]
    assert lrs[0] == pytest.approx(small_cfg().train.lr / 3) and lrs[-1] < lrs[3]
    with pytest.raises(Crash):
        fit(small_cfg(**cfg), data, run_dir=tmp_path / "run", on_step=crash_at(13))
    res = fit(small_cfg(**cfg), data, run_dir=tmp_path / "run")
    assert res.resumed_from_step == 10
    assert_same_weights(ref.final_state, res.final_state)
    assert train_rows(res.history) == train_rows(ref.history)
    assert [r["lr"] for r in res.history if r["kind"] == "train"] == lrs


def test_autocast_runs_message_passing_in_bfloat16():
    graph = hub_graph()
    x = torch.randn(graph.num_nodes, 2, 4)
    rel = torch.randn(graph.num_relations, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = propagate(graph, x, rel, message="mul", aggregators=("sum",), impl="reference")
    want = propagate(
        graph, x.bfloat16(), rel.bfloat16(), message="mul", aggregators=("sum",), impl="reference"
    )
    assert out["sum"].dtype == torch.bfloat16
    assert torch.equal(out["sum"], want["sum"])


def test_bf16_training_follows_the_fp32_loss_curve(data, tmp_path):
    fp32 = fit(small_cfg(epochs=1), data, run_dir=tmp_path / "fp32")
    bf16 = fit(small_cfg(epochs=1, precision="bf16"), data, run_dir=tmp_path / "bf16")
    a = torch.tensor([r["loss"] for r in fp32.history if r["kind"] == "train"])
    b = torch.tensor([r["loss"] for r in bf16.history if r["kind"] == "train"])
    assert not torch.equal(a, b)  # bf16 really changed the arithmetic
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())


def test_without_valid_split_the_last_weights_are_kept(data, tmp_path):
    cfg = small_cfg(epochs=1)
    cfg.eval.splits = ["test"]
    res = fit(cfg, data, run_dir=tmp_path)
    assert res.best_valid == {} and res.test
    assert not [k for r in res.history if r["kind"] == "valid" for k in r if k.startswith("valid_")]
    assert_same_weights(res.final_state, res.model.state_dict())


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_loss_weights_negatives_by_the_configured_temperature(temperature):
    """``build_loss`` weights each negative by softmax(logit / train.adversarial_temperature),
    worked out by hand here; a uniform weighting (or another temperature) gives another value."""
    pos = torch.tensor([1.5, -0.5])
    neg = torch.tensor([[2.0, 0.0, -1.0], [0.5, -2.0, 1.0]])
    loss = build_loss(small_cfg(adversarial_temperature=temperature))

    def by_hand(weights_of: object) -> float:
        total = 0.0
        for p, row in zip(pos.tolist(), neg.tolist(), strict=True):
            w = weights_of(row)
            total += math.log1p(math.exp(-p))  # -log sigmoid(p)
            total += sum(wi * math.log1p(math.exp(v)) for wi, v in zip(w, row, strict=True))
        return total / len(pos)

    def adversarial(row: list[float]) -> list[float]:
        z = [math.exp(v / temperature) for v in row]
        return [x / sum(z) for x in z]

    want = by_hand(adversarial)
    uniform = by_hand(lambda row: [1 / len(row)] * len(row))
    assert loss(pos, neg).item() == pytest.approx(want, rel=1e-6)
    assert abs(want - uniform) > 0.05  # the example tells the weightings apart
