"""``--help`` of every command is plain text for a terminal: no reStructuredText markup
(double backquotes, ``:role:`...``` references, literal-block ``::``), and it still says what
the command's docstring says (every word of it, markup aside)."""

from __future__ import annotations

import importlib
import re

import pytest

from cmpnn_dist.cli.common import plain_text, run_cli

MARKUP = re.compile(r"`|:[a-z]+:`|::\s*$", re.M)


def test_plain_text_on_a_hand_written_docstring():
    doc = (
        "Run :func:`~cmpnn_dist.train.train` (see :mod:`cmpnn_dist.ops` and\n"
        ":class:`the trainer <cmpnn_dist.training.trainer.Trainer>`) with ``key=value``\n"
        "overrides and `default role` text; the result::\n\n"
        '    {"run_dir": ...}\n\n'
        "A last paragraph ::\n\n"
        "    block\n"
    )
    assert plain_text(doc) == (
        "Run train (see cmpnn_dist.ops and\n"
        "the trainer) with key=value\n"
        "overrides and default role text; the result:\n\n"
        '    {"run_dir": ...}\n\n'
        "A last paragraph\n\n"
        "    block\n"
    )


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z][A-Za-z_]{3,}", text)


@pytest.mark.parametrize(
    "module, entry",
    [
        ("cmpnn_dist.cli.train", "_main"), ("cmpnn_dist.cli.evaluate", "_main"),
        ("cmpnn_dist.cli.report", "_main"), ("cmpnn_dist.cli.predict", "_main"),
        ("cmpnn_dist.cli.wl", "_main"),
    ],
)  # fmt: skip
def test_help_has_no_markup(module, entry, capsys):
    mod = importlib.import_module(module)
    assert run_cli(getattr(mod, entry), ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.strip() and not MARKUP.search(out), MARKUP.findall(out)[:5]
    doc = re.sub(r":[a-z]+:`~[^`]*?([^`.]+)`", r"\1", mod.__doc__)  # ~a.b.C: C
    doc_words = _words(re.sub(r":[a-z]+:`([^`<]*)[^`]*`", r"\1", doc))
    printed = set(_words(out))
    assert [w for w in doc_words if w not in printed] == []


def test_sweep_help_is_usage_not_an_error(capsys):
    from cmpnn_dist.cli.sweep import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("python -m cmpnn_dist.sweep SWEEP_DIR") and not MARKUP.search(out)
