"""The README's whole flow on a fresh folder, with a local and a ``file://`` storage root:
train, Ctrl-C (a real SIGINT in step 7), resume with the printed command's settings,
evaluate ``checkpoints/best``, report PNGs, predict, explain with a picture.

References: the uninterrupted tiny run of the session (same numbers, bit-identical resume),
the run folder's own files, and nothing written under the working directory.
"""

from __future__ import annotations

import json
import signal

import pytest

from cmpnn_dist.cli.common import run_cli
from tests.helpers.real_run import interrupt_tiny, train_tiny

pytestmark = pytest.mark.integration  # CLI runs, Ray or kill tests


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("uri", [False, True], ids=["local", "file-uri"])
def test_the_readme_flow(real_run, tmp_path, capsys, monkeypatch, uri):
    from cmpnn_dist.cli.evaluate import _main as evaluate
    from cmpnn_dist.cli.predict import _main as predict
    from cmpnn_dist.cli.report import _main as report

    base, cwd = tmp_path / "store", tmp_path / "cwd"
    cwd.mkdir()
    root = f"file://{base}" if uri else str(base)
    proc = interrupt_tiny(cwd, root, signal.SIGINT, at=7)
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "resume with: python -m cmpnn_dist.train" in proc.stderr.splitlines()[-1]

    monkeypatch.chdir(cwd)
    resumed = train_tiny(root)
    assert resumed["resumed_from_step"] == 7
    assert resumed["test"] == real_run["test"]
    run = f"{root}/runs/tiny"
    assert resumed["run_dir"] == run

    capsys.readouterr()
    assert run_cli(evaluate, [f"ckpt={run}/checkpoints/best"]) == 0
    out = _last_json(capsys.readouterr().out)
    assert out["test"]["mrr"] == pytest.approx(real_run["test"]["mrr"], abs=1e-6)

    assert run_cli(report, [run]) == 0
    plots = _last_json(capsys.readouterr().out)["plots"]
    local_run = base / "runs" / "tiny"
    for name in ("training.png", "validation.png"):
        assert (local_run / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    assert len(plots) == 2

    picture = tmp_path / "why.png"
    args = [f"ckpt={run}", "head=A::0", "relation=t0", "topk=3", "explain=2", f"draw={picture}"]
    assert run_cli(predict, args) == 0
    printed = capsys.readouterr().out
    assert "A::0" in printed and picture.read_bytes()[:4] == b"\x89PNG"
    table = printed.strip().splitlines()[:-1]  # the last line is the JSON summary
    assert "paths to tail rank 1 (A::0, t0, " in printed  # then one path per line
    assert max(map(len, table)) <= 160
    assert list(cwd.iterdir()) == []  # nothing under the working directory (no ./file:/...)
