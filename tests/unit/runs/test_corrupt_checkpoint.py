"""A flipped byte in the newest checkpoint, in ``best``, or in both, on a real run's folder.

The run (tests/helpers/real_run.py's tiny run, ``checkpoint.keep_last=1``): 10 steps, validated
(``best`` = step 10), then extended to 30 steps and killed at step 21, so the folder holds
``step_00000020`` (not validated) and ``best`` (step 10).  The reference is the same two
commands without the kill or the damage: resumed from any valid checkpoint, the run must end
with exactly its history and metrics (deterministic CPU mode replays the lost steps
bit-identically).  Resume and every reader use the newest valid checkpoint among the step
folders and ``best``, say so in one line naming what they skipped and why, and never delete a
valid checkpoint because a newer one is corrupt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.runs.checkpoint import read_manifest
from cmpnn_dist.training.trainer import Trainer
from tests.helpers.real_run import history, train_tiny

SHORT = ["checkpoint.keep_last=1", "train.max_steps=10"]
LONG = ["checkpoint.keep_last=1", "train.max_steps=30"]


class Killed(Exception):
    """Stands for a SIGKILL in step 21 (after step 20's checkpoint was published)."""


def flip_byte(path: Path) -> None:
    """One byte of ``path`` changed in place (same size, same inode), as a bad disk does."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _say_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "skipped" in line or "invalid" in line]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``{"root", "base": the damaged-to-be run folder, "ref": the reference summary and
    history}``."""
    root = tmp_path_factory.mktemp("corrupt") / "storage"
    train_tiny(str(root), "base", SHORT)
    ckpts = root / "runs" / "base" / "checkpoints"
    step10, best = ckpts / "step_00000010" / "state.pt", ckpts / "best" / "state.pt"
    assert step10.read_bytes() == best.read_bytes()
    assert step10.stat().st_ino != best.stat().st_ino  # best is its own copy
    shutil.copytree(root / "runs" / "base", root / "runs" / "ref")
    ref = train_tiny(str(root), "ref", LONG)
    real_step = Trainer.train_step

    def train_step(self, model):
        if self.step + 1 == 21:
            raise Killed
        return real_step(self, model)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "train_step", train_step)
        with pytest.raises(Killed):
            train_tiny(str(root), "base", LONG)
    names = sorted(p.name for p in ckpts.iterdir())
    assert names == ["best", "step_00000020"], names
    assert read_manifest(ckpts / "best")["step"] == 10
    return {"root": root, "ref": ref, "ref_history": history(root / "runs" / "ref")}


def _case(folders, name: str, damaged: list[str]) -> Path:
    run = folders["root"] / "runs" / name
    shutil.copytree(folders["root"] / "runs" / "base", run)
    for folder in damaged:
        flip_byte(run / "checkpoints" / folder / "state.pt")
    return run


def _resume(folders, name: str, capfd) -> tuple[dict, str]:
    capfd.readouterr()
    out = train_tiny(str(folders["root"]), name, LONG)
    return out, capfd.readouterr().err


def _same_as_reference(folders, out: dict, run: Path) -> None:
    ref = folders["ref"]
    assert out["valid"] == ref["valid"] and out["test"] == ref["test"]
    assert history(run) == folders["ref_history"]


def test_a_corrupt_newest_step_resumes_from_best_and_keeps_it(folders, capfd):
    run = _case(folders, "newest", ["step_00000020"])
    out, err = _resume(folders, "newest", capfd)
    step20 = run / "checkpoints" / "step_00000020" / "state.pt"
    lines = _say_lines(err)
    assert lines == [
        f"[cmpnn_dist] resuming from step 10: {run}/checkpoints/best (the newest valid "
        f"checkpoint; skipped {step20}: sha256 does not match the manifest (corrupt))"
    ], err
    assert "Warning" not in err and "starting from step 0" not in err
    assert out["resumed_from_step"] == 10
    _same_as_reference(folders, out, run)
    assert (run / "checkpoints" / "best").is_dir()


def test_a_corrupt_best_resumes_from_the_newest_step_and_is_replaced(folders, capfd):
    run = _case(folders, "best", ["best"])
    out, err = _resume(folders, "best", capfd)
    best = run / "checkpoints" / "best"
    resume = [line for line in err.splitlines() if "resuming from" in line]
    assert resume == [
        f"[cmpnn_dist] resuming from step 20: {run}/checkpoints/step_00000020 (dropped the "
        f"corrupt best: {best}/state.pt: sha256 does not match the manifest (corrupt); best is "
        "the next validated checkpoint)"
    ], err
    assert "Warning" not in err
    assert out["resumed_from_step"] == 20
    _same_as_reference(folders, out, run)
    read_manifest(best)  # valid again: the run's validated step-30 checkpoint
    assert read_manifest(best)["step"] == 30


def test_both_corrupt_is_one_line_and_a_fresh_start(folders, capfd):
    run = _case(folders, "both", ["step_00000020", "best"])
    rc = run_cli(_evaluate_main(), [f"ckpt={run}"])
    err = capfd.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert f"no valid checkpoint at {run}" in errors[0]
    assert "step_00000020/state.pt: sha256" in errors[0] and "best/state.pt: sha256" in errors[0]
    out, err = _resume(folders, "both", capfd)
    lines = _say_lines(err)
    assert len(lines) == 1 and lines[0].startswith(
        f"[cmpnn_dist] no valid checkpoint in {run}/checkpoints (2 invalid, skipped: "
    ), err
    assert lines[0].endswith("): starting from step 0") and "Warning" not in err
    assert out["resumed_from_step"] is None


def _evaluate_main():
    from cmpnn_dist.cli.evaluate import _main

    return _main


def test_readers_use_best_when_the_newest_step_is_corrupt(folders, capfd):
    """``evaluate`` and ``predict`` on the run folder: best's weights, one line, read-only."""
    from cmpnn_dist.cli.predict import _main as predict_main

    run = _case(folders, "readers", ["step_00000020"])
    before = sorted((p.relative_to(run).as_posix(), p.stat().st_mtime_ns) for p in run.rglob("*"))
    capfd.readouterr()
    assert run_cli(_evaluate_main(), [f"ckpt={run}", "eval.max_queries=5"]) == 0
    err = capfd.readouterr().err
    step20 = run / "checkpoints" / "step_00000020" / "state.pt"
    expected = (
        f"using {run}/checkpoints/best, the newest valid checkpoint of {run}: skipped "
        f"{step20}: sha256 does not match the manifest (corrupt)"
    )
    assert _say_lines(err) == [expected], err
    rc = run_cli(predict_main, [f"ckpt={run}", "head=A::0", "relation=t0", "topk=3"])
    out = capfd.readouterr()
    assert rc == 0 and _say_lines(out.err) == [expected], out.err
    assert json.loads(out.out.strip().splitlines()[-1])["rows"] == 3
    kept = [(n, t) for n, t in before if not n.startswith("evaluations")]
    after = sorted((p.relative_to(run).as_posix(), p.stat().st_mtime_ns) for p in run.rglob("*"))
    assert [(n, t) for n, t in after if not n.startswith("evaluations")] == kept
