"""Issue 22's user errors: each is one ``error:`` line (exit status 2, no traceback) that
names the file / line / key, and nothing is left behind."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from cmpnn_dist.cli import run_cli
from cmpnn_dist.train import _main as train_main


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


def test_a_graph_smaller_than_one_batch(tmp_path, capsys):
    raw = _graph(tmp_path / "g", ["a\tr\tb", "b\tr\tc"])
    assert run_cli(train_main, _tsv_args(tmp_path / "s", raw)) == 2
    line = _one_error(capsys)
    assert "2 training facts are fewer than one global batch (16)" in line
    assert "train.batch_size" in line
    assert not (tmp_path / "s" / "runs" / "g").exists()


def test_a_10_mb_tsv_line_is_named_by_its_line_number(tmp_path, capsys):
    raw = _graph(tmp_path / "g", ["a\tr\tb", "b\tr\tc", "x" * (10 << 20) + "\tr\tb"])
    assert run_cli(train_main, _tsv_args(tmp_path / "s", raw)) == 2
    line = _one_error(capsys)
    assert line.startswith(f"error: {raw / 'train.txt'}: line 3: a line of 10,485,764 bytes")


def test_a_mistyped_data_source_says_so_before_building(tmp_path, capsys):
    raw = _graph(tmp_path / "g", ["a\tr\tb"])
    args = [*_tsv_args(tmp_path / "s", raw), "data.source=tsv:transductivx"]
    assert run_cli(train_main, args) == 2
    out = capsys.readouterr().err
    assert "building dataset" not in out
    assert out.strip().startswith("error: data.source='tsv:transductivx' is unknown; known: ")
    assert len(out.strip().splitlines()) == 1
    assert list((tmp_path / "s").iterdir()) == []  # the storage root was checked, no more


def test_wl_help_shows_its_own_usage_not_the_training_keys(capsys):
    from cmpnn_dist.wl.__main__ import main

    assert run_cli(main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "python -m cmpnn_dist.wl" in out and "train.lr" not in out and "presets" not in out


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_a_refused_checkpoint_is_one_line(real_run, tmp_path, capsys):
    """A state.pt that holds a pickled callable (with a manifest that matches it): refused by
    safe loading, reported in one line without torch's explanation text."""
    import hashlib
    import json

    from cmpnn_dist.evaluate import _main

    ckpt = tmp_path / "step_00000001"
    shutil.copytree(Path(real_run["run_dir"]) / "checkpoints" / "best", ckpt)
    data = pickle.dumps({"model": Evil()})
    (ckpt / "state.pt").write_bytes(data)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli(_main, [f"ckpt={ckpt}"]) == 2
    line = _one_error(capsys)
    assert f"{ckpt / 'state.pt'}: cannot be loaded (UnpicklingError: refused" in line
    assert "pwned" not in line and len(line) < 400


@pytest.mark.parametrize("key", ["train.seed=1", "train.lr=0.01"])
def test_a_resume_with_a_changed_key_is_one_line(real_run, tmp_path, capsys, key):
    """Resuming the tiny real run (a copy) with another seed or learning rate."""
    from _real_run import TINY

    root = tmp_path / "s"
    shutil.copytree(real_run["root"], root)
    argv = [f"storage_root={root}", "run_name=tiny", *TINY, key, "train.max_steps=30"]
    assert run_cli(train_main, argv) == 2
    line = _one_error(capsys)
    assert f"{key.split('=')[0]}: " in line and "in the checkpoint" in line


def test_a_sweep_on_a_remote_uri_root_is_one_line(tmp_path, capsys):
    argv = ["-m", "storage_root=s3://bucket/x", "train.seed=0,1"]
    assert run_cli(train_main, argv) == 2
    line = _one_error(capsys)
    assert "storage_root=s3://bucket/x: a sweep needs a local or file:// storage root" in line
