"""User errors: each is one ``error:`` line (exit status 2, no traceback) that names the file
/ line / key, nothing printed before it, and nothing left behind."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.cli.train import _main as train_main
from tests.helpers.cli import assert_one_error_line, listing, run


def _one_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err and err[-1].startswith("error: "), err
    assert not any("Traceback" in line for line in err)
    return err[-1]


def _graph(folder: Path, train: list[str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.txt").write_text("".join(f"{x}\n" for x in train))
    (folder / "valid.txt").write_text("a\tr\tc\n")
    (folder / "test.txt").write_text("b\tr\ta\n")
    return folder


def _tsv_args(root: Path, raw: Path) -> list[str]:
    return [
        f"storage_root={root}", "data.name=g", "data.source=tsv:transductive",
        f"data.raw_path={raw}", "run_name=g", "train.progress=false",
    ]  # fmt: skip


@pytest.mark.integration
def test_a_graph_smaller_than_one_batch(tmp_path):
    """Refused before anything is announced or built: the command prints its one line and
    the storage root is as it was (no dataset, no run folder)."""
    raw = _graph(tmp_path / "g", ["a\tr\tb", "b\tr\tc"])
    root = tmp_path / "s"
    root.mkdir()
    (root / "keep.txt").write_text("a file of the user's")
    before = listing(root)
    proc = run("cmpnn_dist.train", *_tsv_args(root, raw))
    assert_one_error_line(
        proc,
        f"{raw / 'train.txt'}: 2 training facts are fewer than one global batch (16); "
        "lower train.batch_size",
    )
    assert listing(root) == before


def test_a_graph_smaller_than_one_batch_once_duplicates_are_dropped(tmp_path, capsys):
    """16 lines but 2 distinct facts: the size is known only once the dataset is built; the
    run is refused before its first lines and the dataset it built is removed again."""
    raw = _graph(tmp_path / "g", ["a\tr\tb"] * 8 + ["b\tr\tc"] * 8)
    root = tmp_path / "s"
    root.mkdir()
    assert run_cli(train_main, _tsv_args(root, raw)) == 2
    line = _one_error(capsys)
    assert line == (
        f"error: dataset {root / 'datasets' / 'g'}: 2 training facts are fewer than one "
        "global batch (16); lower train.batch_size"
    )
    assert listing(root) == []


def test_a_10_mb_tsv_line_is_named_by_its_line_number(tmp_path, capsys):
    long = "x" * (10 << 20) + "\tr\tb"  # line 3; 17 lines: more than one batch (16)
    raw = _graph(tmp_path / "g", ["a\tr\tb", "b\tr\tc", long, *(f"c{i}\tr\ta" for i in range(14))])
    assert run_cli(train_main, _tsv_args(tmp_path / "s", raw)) == 2
    line = _one_error(capsys)
    assert line.startswith(f"error: {raw / 'train.txt'}: line 3: a line of 10,485,764 bytes")


def test_a_mistyped_data_source_says_so_before_building(tmp_path, capsys):
    raw = _graph(tmp_path / "g", ["a\tr\tb"])
    args = [*_tsv_args(tmp_path / "s", raw), "data.source=tsv:transductivx"]
    assert run_cli(train_main, args) == 2
    out = capsys.readouterr().err
    assert "building dataset" not in out
    from cmpnn_dist.convert import sources

    want = f"error: bad value 'tsv:transductivx' for data.source; choose one of {sources.names()}"
    assert out.strip() == want  # every registered source, listed by the schema's choice check
    assert len(out.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # the root the check made is removed again


def test_wl_help_shows_its_own_usage_not_the_training_keys(capsys):
    from cmpnn_dist.cli.wl import main

    assert run_cli(main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m cmpnn_dist.wl" in out and "train.lr" not in out and "presets" not in out


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.integration
def test_a_refused_checkpoint_is_one_line(real_run, tmp_path):
    """A state.pt that holds a pickled callable (with a manifest that matches it): refused by
    safe loading, reported in one line without torch's explanation text, and without the
    warning torch prints about the pickle protocol before it refuses (a real process: pytest
    would capture the warning)."""
    import hashlib
    import json

    ckpt = tmp_path / "step_00000001"
    shutil.copytree(Path(real_run["run_dir"]) / "checkpoints" / "best", ckpt)
    data = pickle.dumps({"model": Evil()})
    (ckpt / "state.pt").write_bytes(data)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    proc = run("cmpnn_dist.evaluate", f"ckpt={ckpt}")
    assert_one_error_line(proc, f"{ckpt / 'state.pt'}: cannot be loaded (UnpicklingError: refused")
    assert "Warning" not in proc.stderr and "pickle protocol" not in proc.stderr
    assert "pwned" not in proc.stderr and len(proc.stderr) < 400


@pytest.mark.parametrize("key", ["train.seed=1", "train.lr=0.01"])
def test_a_resume_with_a_changed_key_is_one_line(real_run, tmp_path, capsys, key):
    """Resuming the tiny real run (a copy) with another seed or learning rate: the error is
    all the command prints (the checks come before the run's first lines)."""
    from tests.helpers.real_run import TINY

    root = tmp_path / "s"
    shutil.copytree(real_run["root"], root)
    argv = [f"storage_root={root}", "run_name=tiny", *TINY, key, "train.max_steps=30"]
    assert run_cli(train_main, argv) == 2
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and captured.out == "", lines
    assert f"{key.split('=')[0]}: " in lines[0] and "in the checkpoint" in lines[0]


@pytest.mark.integration
def test_a_resume_that_changes_the_model_prints_only_its_error(real_run, tmp_path):
    """Through the real command: no run folder line, no resume command, no data line, no
    "resuming from step" before the one error line; the run folder is left as it was."""
    from tests.helpers.real_run import TINY

    root = tmp_path / "s"
    shutil.copytree(real_run["root"], root)
    run_dir = root / "runs" / "tiny"
    before = listing(run_dir)
    proc = run("cmpnn_dist.train", f"storage_root={root}", "run_name=tiny", *TINY,
               "model.hidden_dim=16")  # fmt: skip
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, lines
    step = max(s for s in (20, 10) if (run_dir / "checkpoints" / f"step_{s:08d}").is_dir())
    assert lines[0] == (
        f"error: {run_dir / 'checkpoints' / f'step_{step:08d}'} was written by a run with "
        "other settings, so resuming it would not continue that run: model.hidden_dim: 8 in "
        "the checkpoint, 16 now; use the checkpoint's values, another run_name, or "
        "resume=false to start this run afresh"
    )
    assert listing(run_dir) == before


def test_a_sweep_on_a_remote_uri_root_is_one_line(tmp_path, capsys):
    argv = ["-m", "storage_root=s3://bucket/x", "train.seed=0,1"]
    assert run_cli(train_main, argv) == 2
    line = _one_error(capsys)
    assert "storage_root=s3://bucket/x: a sweep needs a local or file:// storage root" in line
