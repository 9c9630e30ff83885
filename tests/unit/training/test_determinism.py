"""A CPU run's floats do not depend on the intra-op thread count (docs/configs.md,
"Reproducibility"): the compiled kernel's backward, the ordered sums of
``cmpnn_dist/ops/ordered.py`` against torch, and whole training runs with 1 thread, 2 threads
and the governor switching between them every step, which must end with the same weights."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

from cmpnn_dist.config import Config
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.ops import available_impls, ordered, propagate
from cmpnn_dist.training import loop
from cmpnn_dist.training import threads as th
from cmpnn_dist.training.data import train_data_from_triples
from cmpnn_dist.training.reproducibility import thread_invariant
from tests.helpers.training import Crash, crash_at

pytestmark = pytest.mark.skipif(
    "cpu" not in available_impls(), reason="compiled CPU kernel unavailable (no compiler)"
)
THREADS = (1, 2, 3)


@contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _same_for_every_thread_count(fn):
    """``fn()`` (a list of tensors) with 1, 2 and 3 threads; asserts bit-identical results."""
    runs = []
    for n in THREADS:
        with _threads(n):
            runs.append([t.detach().clone() for t in fn()])
    for run in runs[1:]:
        for got, want in zip(run, runs[0], strict=True):
            assert torch.equal(got, want)
    return runs[0]


def _facts(num_nodes: int, num_rel: int, num_facts: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    h = torch.randint(0, num_nodes, (num_facts,), generator=g)
    r = torch.randint(0, num_rel, (num_facts,), generator=g)
    t = torch.randint(0, num_nodes, (num_facts,), generator=g)
    return torch.unique(torch.stack([h, r, t], 1), dim=0)


@pytest.mark.parametrize("per_query", [False, True])
@pytest.mark.parametrize("aggs", [("sum",), ("sum", "sumsq", "max", "min")])
def test_kernel_backward_is_the_same_for_any_thread_count(per_query, aggs):
    """d x and d w of the compiled kernel (d w: a reduction over all edges of a relation)."""
    graph = graph_from_triples(300, 40, _facts(300, 40, 3000).numpy())
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(300, 4, 16, generator=gen)
    shape = (4, graph.num_relations, 16) if per_query else (graph.num_relations, 16)
    w = torch.randn(*shape, generator=gen)
    grads = {a: torch.randn(300, 4, 16, generator=gen) for a in aggs}

    def run():
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = propagate(graph, xl, wl, message="mul", aggregators=aggs, impl="cpu")
        sum((out[a] * grads[a]).sum() for a in aggs).backward()
        return [out[a] for a in aggs] + [xl.grad, wl.grad]

    _same_for_every_thread_count(run)


def test_ordered_sums_match_torch_and_do_not_depend_on_threads():
    gen = torch.Generator().manual_seed(0)
    for shape in [(70_001, 1), (70_001, 3), (63, 1), (64, 5)]:
        x = torch.randn(*shape, generator=gen)
        (got,) = _same_for_every_thread_count(lambda x=x: [ordered.sum_rows(x)])
        torch.testing.assert_close(got.double(), x.double().sum(0), rtol=1e-5, atol=1e-3)
    x = torch.rand(50_000, generator=gen)
    (got,) = _same_for_every_thread_count(lambda: [ordered.mean(x)])
    torch.testing.assert_close(got.double(), x.double().mean(), rtol=1e-6, atol=0)
    for m, k, n in [(8, 11_520, 32), (32, 12_751, 64), (1, 20_000, 64), (16, 100, 8)]:
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        (got,) = _same_for_every_thread_count(lambda a=a, b=b: [ordered.contract(a, b)])
        torch.testing.assert_close(got.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("out_features", [1, 32])
def test_ordered_linear_is_torchs_linear_with_invariant_gradients(out_features):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 16, 64, generator=gen)
    w = torch.randn(out_features, 64, generator=gen)
    b = torch.randn(out_features, generator=gen)
    g = torch.randn(1000, 16, out_features, generator=gen)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        y = fn(*leaves)
        y.backward(g)
        return [y] + [t.grad for t in leaves]

    got = _same_for_every_thread_count(lambda: run(ordered.linear))
    want = run(F.linear)
    for a, e in zip(got, want, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-3)


def test_ordered_layer_norm_is_torchs_with_invariant_gradients():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 16, 32, generator=gen) * 3 + 1
    g = torch.randn(1000, 16, 32, generator=gen)
    ref = torch.nn.LayerNorm(32)
    with torch.no_grad():
        ref.weight.copy_(torch.rand(32, generator=gen) + 0.5)
        ref.bias.copy_(torch.randn(32, generator=gen))
    mine = ordered.LayerNorm(32)
    mine.load_state_dict(ref.state_dict())  # the same parameters, names and all

    def run(module):
        module.zero_grad()
        xl = x.clone().requires_grad_()
        y = module(xl)
        y.backward(g)
        return [y, xl.grad, module.weight.grad, module.bias.grad]

    got = _same_for_every_thread_count(lambda: run(mine))
    want = run(ref)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])  # forward, d x: torch's
    for a, e in zip(got[2:], want[2:], strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-3)


# ---------------------------------------------------------------- whole training runs
def _data():
    """400 nodes, 6 relations: a layer's states [400, 16, 32] are 204,800 elements, above
    torch's single-thread limit for a reduction, and W_0's weight gradient is a product with
    a contraction of 6,400 rows (BLAS splits it)."""
    facts = _facts(400, 6, 3000)
    perm = torch.randperm(len(facts), generator=torch.Generator().manual_seed(2))
    facts = facts[perm]
    return train_data_from_triples(400, 6, facts[200:], facts[:100], facts[100:200])


def _cfg(num_threads: int | None) -> Config:
    cfg = Config()
    cfg.model.num_layers = 2
    cfg.model.hidden_dim = 32
    cfg.model.decoder_hidden_dim = 32
    cfg.train.batch_size = 16
    cfg.train.num_negatives = 16
    cfg.train.max_steps = 4
    cfg.train.epochs = 1
    cfg.train.num_threads = num_threads
    cfg.train.progress = False
    cfg.eval.splits = []  # no ranking: the last weights are the result
    cfg.checkpoint.every_minutes = None
    return cfg


@pytest.fixture(scope="module")
def data():
    return _data()


def _weights(res) -> dict[str, torch.Tensor]:
    return res.model.state_dict()


def test_training_gives_the_same_weights_with_1_2_and_switching_threads(
    data, tmp_path, monkeypatch
):
    """The default policy (train.num_threads null) follows the load; here the load reads
    idle / busy / idle ... at every step (a 2-core allowance), so the count switches 2 -> 1 ->
    2 ...; the weights must be those of a 1-thread and of a 2-thread run."""
    one = _weights(loop.fit(_cfg(1), data, run_dir=tmp_path / "one"))
    two = loop.fit(_cfg(2), data, run_dir=tmp_path / "two")
    readings = iter([0.0, 2.0] * 20)
    monkeypatch.setattr(th, "allowed_cpus", lambda cap=None: 2)
    monkeypatch.setattr(th, "measure_others_busy", lambda window_s=0.1: 0.0)
    monkeypatch.setattr(th, "others_busy_since", lambda a, b: next(readings))
    governor_for = loop.governor_for

    def every_step(*args, **kwargs):
        governor = governor_for(*args, **kwargs)
        governor.interval_s = 0.0
        return governor

    monkeypatch.setattr(loop, "governor_for", every_step)
    switching = loop.fit(_cfg(None), data, run_dir=tmp_path / "switching")
    record = json.loads((tmp_path / "switching" / "results.json").read_text())["reproducibility"]
    assert record["thread_invariant"] is True and record["threads"] == "load"
    assert record["threads_used"] == [1, 2]  # the governor did switch
    for name, want in one.items():
        assert torch.equal(_weights(two)[name], want), name
        assert torch.equal(_weights(switching)[name], want), name


def test_a_run_resumed_at_another_thread_count_ends_as_a_straight_run(data, tmp_path):
    """2 threads up to a crash after step 2, resumed with 1 thread: the 1-thread run's weights
    (no train.deterministic), and the record lists both counts."""
    straight = _weights(loop.fit(_cfg(1), data, run_dir=tmp_path / "straight"))
    first = _cfg(2)
    first.checkpoint.every_steps = 2
    with pytest.raises(Crash):
        loop.fit(first, data, run_dir=tmp_path / "run", on_step=crash_at(2))
    then = _cfg(1)
    then.checkpoint.every_steps = 2
    res = loop.fit(then, data, run_dir=tmp_path / "run")
    assert res.resumed_from_step == 2
    for name, want in straight.items():
        assert torch.equal(_weights(res)[name], want), name
    record = json.loads((tmp_path / "run" / "results.json").read_text())["reproducibility"]
    assert record["threads_used"] == [1, 2] and record["threads"] == 1


def test_a_run_that_is_not_invariant_fixes_its_count_and_keeps_it_on_resume(monkeypatch):
    """ops.impl=reference (index accumulation per thread): the count is fixed from the
    allowed cores, whatever the load, and a resume keeps the checkpoint's count."""
    cfg = _cfg(None)
    cfg.ops.impl = "reference"
    invariant, why = thread_invariant(cfg)
    assert not invariant and "reference" in why
    monkeypatch.setattr(th, "allowed_cpus", lambda cap=None: 2)
    monkeypatch.setattr(th, "measure_others_busy", lambda window_s=0.1: 2.0)  # every core busy
    monkeypatch.setattr(th, "others_busy_since", lambda a, b: 2.0)
    with _threads(torch.get_num_threads()):
        gov = th.governor_for(cfg, _data_sizes())
        gov.interval_s = 0.0
        assert gov.threads == 2 and gov.update() == 2  # the load is not read
        assert gov.record()["threads"] == 2 and gov.record()["thread_invariant"] is False
        gov.resume({"threads": 1, "threads_used": [1]})  # the checkpoint ran with 1
        assert gov.threads == 1 == torch.get_num_threads() and gov.update() == 1
        assert gov.record()["threads_used"] == [1]
        assert thread_invariant(_cfg(None)) == (True, "")


def _data_sizes():
    class Sizes:
        num_nodes = 400

    return Sizes()
