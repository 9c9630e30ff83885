"""``benchmarks/harness/provenance.py``'s ``command_line`` and ``child_command``: the commands a
results file records, on hand-written argument lists.

The recorded command must rerun the benchmark: every argument quoted for the shell, the
script named as ``benchmarks/<file>`` whatever path it ran from, and only the options the
caller names as a summary's own left out.
"""

from __future__ import annotations

import shlex
import sys

from benchmarks.harness.provenance import child_command, command_line

X = "/any/checkout/benchmarks/ops/x.py"  # a script's __file__


def test_the_script_is_named_by_its_file_in_benchmarks():
    assert (
        command_line("/somewhere/else/benchmarks/cluster/chaos.py", [])
        == "python -m benchmarks.cluster.chaos"
    )
    assert (
        command_line("benchmarks/wl/wl_time.py", ["--rounds", "6"])
        == "python -m benchmarks.wl.wl_time --rounds 6"
    )


def test_an_argument_with_spaces_is_quoted():
    assert command_line(X, ["--load", "the sweep at nice 15", "--rounds", "3"]) == (
        "python -m benchmarks.ops.x --load 'the sweep at nice 15' --rounds 3"
    )


def test_an_argument_with_a_quote_character_is_quoted():
    assert command_line(X, ["--note", "it's late"]) == (
        """python -m benchmarks.ops.x --note 'it'"'"'s late'"""
    )
    assert command_line(X, ["--extra", "a=$HOME", ""]) == (
        "python -m benchmarks.ops.x --extra 'a=$HOME' ''"
    )


def test_a_dropped_flag_is_left_out():
    argv = ["--collect", "--seeds", "0", "1", "--collect"]
    assert command_line(X, argv, drop_flags=["--collect"]) == (
        "python -m benchmarks.ops.x --seeds 0 1"
    )


def test_a_dropped_option_is_left_out_with_its_value_in_both_spellings():
    argv = ["--reading", "no loss", "--seeds", "0", "--reading=again, later", "--rounds", "2"]
    assert command_line(X, argv, drop_options=("--reading",)) == (
        "python -m benchmarks.ops.x --seeds 0 --rounds 2"
    )
    assert command_line(X, ["--seeds", "0", "--reading"], drop_options=("--reading",)) == (
        "python -m benchmarks.ops.x --seeds 0"
    )


def test_arguments_that_only_look_like_dropped_names_are_kept():
    # an option that begins like a dropped one, and a value (argparse takes an argument with
    # a space in it as a value even when it begins with "--") that begins like one
    argv = ["--collect-all", "--readings=3", "--load", "--collect this", "--note=--reading=x"]
    got = command_line(X, argv, drop_flags=("--collect",), drop_options=("--reading",))
    assert got == (
        "python -m benchmarks.ops.x --collect-all --readings=3 --load '--collect this' "
        "--note=--reading=x"
    )


def test_the_recorded_command_splits_back_into_the_kept_arguments():
    note = 'it\'s "quoted"\tand $x'
    argv = ["--load", "the sweep at nice 15", "--collect", "--note", note, "--reading", "a summary",
            "--extra", "", "--reading=b", "--tag", "ü; rm -rf /"]  # fmt: skip
    kept = ["--load", "the sweep at nice 15", "--note", note, "--extra", "", "--tag", "ü; rm -rf /"]
    line = command_line(X, argv, drop_flags=("--collect",), drop_options=("--reading",))
    assert shlex.split(line)[:3] == ["python", "-m", "benchmarks.ops.x"]
    assert shlex.split(line)[3:] == kept
    assert shlex.split(command_line(X, argv))[3:] == argv


def test_a_subprocess_command_names_python_and_quotes_for_the_shell():
    cmd = [sys.executable, "-m", "cmpnn_dist.train", "eval.splits=[valid]", "storage_root=<root>"]
    line = child_command(cmd)
    # the interpreter's path reads as `python`; the glob and redirection characters are quoted
    assert line == "python -m cmpnn_dist.train 'eval.splits=[valid]' 'storage_root=<root>'"
    assert shlex.split(line) == ["python", *cmd[1:]]


def test_a_subprocess_command_keeps_another_program_as_it_is():
    assert child_command(["ray", "job", "submit", "--", "a b"]) == "ray job submit -- 'a b'"
