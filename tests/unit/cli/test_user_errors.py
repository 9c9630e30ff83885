"""Every user mistake is one ``error:`` line naming the key, exit status 2, and nothing left
behind in the storage root; ``--help`` lists the presets and the keys."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from tests.helpers.cli import assert_one_error_line, listing, run

BAD_VALUES = [
    ("train.lr=-0.1", "train.lr must be > 0"),
    ("eval.filter=tests", "eval.filter"),
    ("train.epochs=0", "train.epochs must be >= 1"),
    ("train.max_steps=-1", "train.max_steps must be >= 1"),
    ("eval.splits=[foo]", "bad value 'foo' for eval.splits"),
    ("eval.splits=[]", "eval.splits is empty"),
    ("model.message=3 model.num_bases=0", "model.num_bases must be >= 1"),
    ("model.num_bases=4", "model.num_bases=4 is used only with model.message=3 or"),
    ("model.aggregate=median", "bad value 'median' for model.aggregate"),
    ("train.remove_query_edges=all", "bad value 'all' for train.remove_query_edges"),
    ("train.precision=fp8", "bad value 'fp8' for train.precision"),
    ("train.warmup_steps=10 train.max_steps=5", "train.warmup_steps=10 exceeds"),
    ("cluster.num_workers=3 train.batch_size=16", "divisible by cluster.num_workers=3"),
    ("cluster.num_workers=2 train.device=cuda", "needs cluster.use_gpu=true"),
    ("data.node_types=prefix", "data.node_types applies to tsv: sources only"),
]
if not torch.cuda.is_available():
    BAD_VALUES.append(("train.device=cuda", "this machine has no CUDA device"))
if importlib.util.find_spec("triton") is None:
    BAD_VALUES.append(("ops.impl=fused", "ops.impl=fused needs Triton"))
if importlib.util.find_spec("torch_scatter") is None:
    BAD_VALUES.append(("ops.impl=scatter", "ops.impl=scatter needs torch-scatter"))


@pytest.mark.triton
def test_bad_values_are_one_line_in_process(tmp_path):
    """The same checks through the in-process entry point (fast; one Python start)."""
    import contextlib
    import io

    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.train import _main

    for overrides, needle in BAD_VALUES:
        err = io.StringIO()
        argv = [f"storage_root={tmp_path}", *overrides.split()]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = run_cli(_main, argv)
        lines = err.getvalue().strip().splitlines()
        assert status == 2, (overrides, err.getvalue())
        assert len(lines) == 1 and needle in lines[0], (overrides, lines)
    assert list(tmp_path.iterdir()) == []  # no dataset, no run folder was started


@pytest.mark.integration
@pytest.mark.triton
@pytest.mark.parametrize("overrides, needle", BAD_VALUES[:3])
def test_bad_values_through_the_command_line(tmp_path, overrides, needle):
    proc = run("cmpnn_dist.train", f"storage_root={tmp_path}", *overrides.split())
    assert_one_error_line(proc, needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_config_error_quotes_only_what_the_user_typed():
    proc = run("cmpnn_dist.train", "model.bogus=3")
    assert_one_error_line(proc, "model.bogus=3")
    assert "data_root" not in proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize("module", ["cmpnn_dist.train", "cmpnn_dist.evaluate"])
def test_help_lists_presets_and_keys(module):
    proc = run(module, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "fb237_ind_v1" in proc.stdout and "biokg" in proc.stdout
    assert "model.aggregate='sum'  (sum | mean | max | pna)" in proc.stdout
    assert "train.precision='fp32'  (fp32 | bf16)" in proc.stdout


@pytest.mark.integration
def test_storage_and_convert_errors_exit_2(tmp_path):
    proc = run("cmpnn_dist.storage", "verify", str(tmp_path / "missing"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: "), proc.stderr
    bad = tmp_path / "raw"
    bad.mkdir()
    for split in ("train", "valid", "test"):
        (bad / f"{split}.txt").write_text("a\tr\tb\nonly-two\tfields\n")
    proc = run("cmpnn_dist.convert", "tsv:transductive", str(tmp_path / "out"), "--raw", str(bad))
    assert proc.returncode == 2, proc.stderr
    assert "train.txt" in proc.stderr and "line 2" in proc.stderr
    assert not (tmp_path / "out").exists()


UNKNOWN_KEY = "train.lrr is not a config key; did you mean train.lr?"


@pytest.mark.parametrize("override", ["+train.lrr=0.01", "++train.lrr=0.01", "train.lrr=0.01"])
def test_an_unknown_key_is_one_line_with_or_without_plus(tmp_path, override, capsys):
    """Hydra's own hint for an unknown key is to append it with ``+``; the schema declares
    no ``train.lrr``, so the key is refused however it is given, before anything is made."""
    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.train import _main

    assert run_cli(_main, [f"storage_root={tmp_path}", override]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: {override}: {UNKNOWN_KEY} " + (
        "(keys and open maps such as data.synthetic are listed by --help; a + prefix cannot "
        "add a new key)"
    )
    assert captured.out == "" and listing(tmp_path) == []


@pytest.mark.integration
def test_an_unknown_key_with_plus_through_the_command_line(tmp_path):
    proc = run("cmpnn_dist.train", f"storage_root={tmp_path}", "+train.lrr=0.01")
    assert_one_error_line(proc, f"+train.lrr=0.01: {UNKNOWN_KEY}")
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    "overrides", [["train.seed=0,1", "+train.lrr=0.01"], ["+train.lrr=0.01,0.02"]]
)
def test_an_unknown_key_in_a_sweep_is_one_line(tmp_path, overrides, capsys):
    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.train import _main

    assert run_cli(_main, ["-m", f"storage_root={tmp_path}", *overrides]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {overrides[-1]}: "), lines  # as given
    assert UNKNOWN_KEY in lines[0]
    assert listing(tmp_path) == []


def test_evaluate_and_predict_refuse_an_unknown_key(real_run, capsys):
    """Both read a run's saved config and put the overrides on top: ``+`` or not, a key the
    schema does not declare is one line and the run folder is left as it was."""
    from cmpnn_dist.cli.common import run_cli
    from cmpnn_dist.cli.evaluate import _main as evaluate_main
    from cmpnn_dist.cli.predict import _main as predict_main

    run_dir = Path(real_run["run_dir"])
    before = listing(run_dir)
    for override in ("+train.lrr=0.01", "train.lrr=0.01"):
        assert run_cli(evaluate_main, [f"ckpt={run_dir}", override]) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {override}: {UNKNOWN_KEY}")
        argv = [f"ckpt={run_dir}", "head=e0", "relation=b0", override]
        assert run_cli(predict_main, argv) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {override}: {UNKNOWN_KEY}")
    assert listing(run_dir) == before


@pytest.mark.parametrize(
    "module, argv, hint",
    [
        ("cmpnn_dist.cli.predict", ["head=e0", "relation=b0", "topkk=3"], "topk"),
        ("cmpnn_dist.cli.predict", ["head=e0", "relation=b0", "explian=2"], "explain"),
        ("cmpnn_dist.cli.evaluate", ["weight=last"], "weights"),
        ("cmpnn_dist.cli.batch", ["relation=b0", "heads=all", "top_kk=3"], "top_k"),
        ("cmpnn_dist.cli.serve", ["serve.prot=80"], "serve.port"),
        ("cmpnn_dist.cli.train", ["cnf=default"], "conf"),
    ],
)
def test_a_mistyped_command_option_gets_the_closest(real_run, module, argv, hint, capsys):
    """A mistyped option of the command itself (not a config key) is one line naming the
    option meant, before anything is read: the run folder is left as it was."""
    import importlib

    from cmpnn_dist.cli.common import run_cli

    run_dir = Path(real_run["run_dir"])
    before = listing(run_dir)
    main = importlib.import_module(module)._main
    bad = argv[-1].partition("=")[0]
    ckpt = [] if module == "cmpnn_dist.cli.train" else [f"ckpt={run_dir}"]
    assert run_cli(main, [*ckpt, *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    assert lines[0].startswith(
        f"error: {argv[-1]}: {bad} is not a config key; did you mean {hint}?"
    )
    assert listing(run_dir) == before


def test_declared_keys_and_open_maps_are_accepted_with_plus():
    """The negative control: ``+`` on a key inside a declared open map (the synthetic
    generator's parameters) composes, and evaluate accepts ``+`` on a declared key."""
    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.config.keys import declared
    from cmpnn_dist.runs.restore import config_from_checkpoint

    cfg = compose_config("default", ["+data.synthetic.num_entities=300"])
    assert cfg.data.synthetic == {"num_entities": 300}
    saved = {"train": {"lr": 0.005}}
    assert config_from_checkpoint(saved, ["+train.lr=0.01"]).train.lr == 0.01
    assert declared("model.prune.gate") and declared("data.synthetic.anything")
    assert declared("eval.splits.0")
    assert not declared("train.lr.x") and not declared("model.prune.gates")
