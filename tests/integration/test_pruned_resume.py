"""A pruned run (model.propagation=pruned, INIT 3 so the RNG matters) SIGKILLed in a separate
process resumes bit for bit: weights, losses and metrics equal those of an uninterrupted run,
with A*Net's constant for unvisited candidates, with the relation prior on them, and with it on
every candidate (model.prior; its parameters and Adam state restored like every other)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from cmpnn_dist.runs.checkpoint_store import CheckpointStore
from cmpnn_dist.training.loop import fit
from tests.helpers.paths import REPO_ROOT
from tests.helpers.training import assert_same_weights, rule_kg, small_cfg, train_rows

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests


def pruned_cfg(unvisited: str = "constant", prior: str = "none"):
    cfg = small_cfg()
    cfg.model.propagation = "pruned"
    cfg.model.prune.node_ratio = 0.25  # 8 of 32 nodes per layer and query
    cfg.model.prune.degree_ratio = 0.5
    cfg.model.prune.unvisited = unvisited
    cfg.model.prior = prior
    return cfg


@pytest.mark.parametrize(
    "unvisited,prior", [("constant", "none"), ("relations", "none"), ("constant", "relations")]
)
def test_pruned_run_sigkilled_resumes_bit_identical(tmp_path, unvisited, prior):
    data = rule_kg(32)
    ref = fit(pruned_cfg(unvisited, prior), data, run_dir=tmp_path / "ref")
    # the default priority is the decoder (A*Net): no parameters of the pruning's own but the
    # unvisited-candidate prior's
    assert "decoder.out.bias" in ref.final_state
    own = {k for k in ref.final_state if k.startswith("pruned.")}
    assert bool(own) == (unvisited == "relations")
    assert all(k.startswith("pruned.unvisited.") for k in own)
    assert any(k.startswith("prior.") for k in ref.final_state) == (prior == "relations")
    run = tmp_path / "killed"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from tests.integration.test_pruned_resume import pruned_cfg
        from tests.helpers.training import rule_kg
        from cmpnn_dist.training.loop import fit

        def kill(step):
            if step == 13:
                os.kill(os.getpid(), signal.SIGKILL)

        fit(pruned_cfg({unvisited!r}, {prior!r}), rule_kg(32), run_dir={str(run)!r}, on_step=kill)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    found = CheckpointStore(run).find_latest()
    assert found is not None and found.path.name == "step_00000010"
    res = fit(pruned_cfg(unvisited, prior), data, run_dir=run)
    assert res.resumed_from_step == 10
    assert_same_weights(ref.final_state, res.final_state)
    assert_same_weights(ref.model.state_dict(), res.model.state_dict())
    assert train_rows(res.history) == train_rows(ref.history)
    assert res.best_valid == ref.best_valid and res.test == ref.test
