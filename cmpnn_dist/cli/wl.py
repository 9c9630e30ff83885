"""``python -m cmpnn_dist.wl GRAPH.tsv --pair a,b --pair c,d --test rawl2 [--rounds T]``.

Reads ``head<TAB>relation<TAB>tail`` facts, runs each requested test (comma-separated list, or
``all``) and prints, per test, one human line with every pair's colour and whether the pairs
are all told apart, then one JSON object (last stdout line)::

    {"graph": ..., "num_nodes": N, "num_facts": F, "pairs": [[a, b], ...],
     "results": {test: {"rounds": t, "stable": bool, "colours": [...],
                        "distinguished": bool, "groups": [[pair indices sharing a colour]]}}}

``distinguished`` is true iff every pair has its own colour.  For rwl1 / rwl1+ a pair's colour is
``(rwl_1(u), rwl_1(v))``.  ``--node NAME`` (repeatable) declares a node without facts (the
paper's counterexamples have isolated nodes).  Bad input is one ``error:`` line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.errors import UsageError
from cmpnn_dist.wl.graph import read_kg
from cmpnn_dist.wl.refine import ETAS, TESTS, run_test

HELP_CONFIG_KEYS = False  # --help: this module's usage, not the training keys


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 via run_cli
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m cmpnn_dist.wl", description=__doc__.splitlines()[0])
    p.add_argument("graph", type=Path, help="TSV file: head<TAB>relation<TAB>tail")
    p.add_argument("--pair", action="append", required=True, help="HEAD,TAIL (repeat)")
    p.add_argument("--test", default="rawl2", help=f"one of {','.join(TESTS)}, a list, or all")
    p.add_argument("--rounds", type=int, default=None, help="rounds t (default: until stable)")
    p.add_argument("--node", action="append", default=[], help="declare an isolated node")
    p.add_argument("--eta", default="diag", choices=ETAS, help="initial pair colouring")
    return p


def _main(argv: list[str]) -> dict[str, Any]:
    if any(a in ("-h", "--help") for a in argv):
        _parser().print_help()
        raise SystemExit(0)
    args = _parser().parse_args(argv)
    tests = list(TESTS) if args.test == "all" else args.test.split(",")
    for t in tests:
        if t not in TESTS:
            raise UsageError(f"--test {t!r} is not one of {list(TESTS)} or 'all'")
    if args.rounds is not None and args.rounds < 0:
        raise UsageError(f"--rounds must be >= 0, got {args.rounds}")
    kg, _ = read_kg(args.graph, tuple(args.node))
    pairs, ids = [], []
    for text in args.pair:
        parts = text.split(",")
        if len(parts) != 2 or not all(parts):
            raise UsageError(f"--pair {text!r} must be HEAD,TAIL (two node names)")
        try:
            ids.append((kg.node_id(parts[0]), kg.node_id(parts[1])))
        except KeyError as exc:
            raise UsageError(f"--pair {text!r}: {exc.args[0]} of {args.graph}") from None
        pairs.append(parts)
    results = {}
    for test in tests:
        col = run_test(kg, test, args.rounds, eta=args.eta)
        colours = [col.pair_colour(u, v) for u, v in ids]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, c in enumerate(colours):
            groups.setdefault(c, []).append(i)
        distinguished = len(groups) == len(colours)
        shown = "  ".join(
            f"({a},{b})={'/'.join(map(str, c))}" for (a, b), c in zip(pairs, colours, strict=True)
        )
        state = "stable" if col.stable else "not yet stable"
        verdict = "distinguished" if distinguished else "NOT distinguished"
        print(f"{test:7s} {col.rounds} rounds ({state}): {shown}  -> {verdict}")
        results[test] = {
            "rounds": col.rounds,
            "stable": col.stable,
            "num_colours": col.num_colours[-1],
            "colours": [list(c) for c in colours],
            "distinguished": distinguished,
            "groups": [g for g in groups.values()],
        }
    return {
        "graph": str(args.graph),
        "num_nodes": kg.num_nodes,
        "num_facts": kg.num_edges,
        "pairs": pairs,
        "results": results,
    }


def main() -> None:
    sys.exit(run_cli(_main))
