"""Every target a suite declares names options its script defines: each target's arguments (and
its quick run's) go through the script's own parser, in process, stopped right after parsing."""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys

import pytest

from benchmarks.harness.suites import STUDIES, SUITES, targets


class Parsed(Exception):
    """Raised by the patched parser once the arguments parsed."""


ALL = [(suite, t) for suite in (*SUITES, STUDIES) for t in targets(suite)]


def parses(suite: str, module: str) -> bool:
    """Whether the script reads options at all (a few take none)."""
    source = importlib.import_module(f"benchmarks.{suite}.{module}").__file__
    return "make_parser(" in open(source).read()


CASES = [
    (suite, t, quick)
    for suite, t in ALL
    if parses(suite, t.module)
    for quick in (False, True)
    if not quick or t.quick is not None
]


def test_a_script_without_options_is_declared_without_arguments():
    bare = [(s, t) for s, t in ALL if not parses(s, t.module)]
    assert bare and all(t.args == () and t.quick is None for _, t in bare)


@pytest.mark.parametrize(
    ("suite", "target", "quick"),
    CASES,
    ids=[f"{s}.{t.label()}{'-quick' if q else ''}" for s, t, q in CASES],
)
def test_the_targets_arguments_parse(suite, target, quick, tmp_path, monkeypatch):
    module = importlib.import_module(f"benchmarks.{suite}.{target.module}")
    args = [a.replace("{tmp}", str(tmp_path)) for a in (target.quick if quick else target.args)]
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, argv=None, namespace=None):
        real(self, argv, namespace)
        raise Parsed

    real_intermixed = argparse.ArgumentParser.parse_intermixed_args

    def intermixed_then_stop(self, argv=None, namespace=None):
        real_intermixed(self, argv, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_intermixed_args", intermixed_then_stop)
    monkeypatch.setattr(sys, "argv", [module.__file__, *args])
    takes_argv = bool(inspect.signature(module.main).parameters)
    with pytest.raises(Parsed):
        module.main(args) if takes_argv else module.main()
