"""cmpnn_dist.wl: the vectorised tests against the brute-force reference, the hierarchy's
refinements on random graphs, and the paper's counterexamples through the CLI (fixtures)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cmpnn_dist.cli.common import run_cli
from cmpnn_dist.cli.wl import _main
from cmpnn_dist.graph import graph_from_triples
from cmpnn_dist.wl import KG, TESTS, distinguishes, read_kg, run_test
from tests.helpers import wl_reference as ref
from tests.helpers.paths import REPO_ROOT
from tests.helpers.paths import REPO_ROOT as REPO

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "wl"


def random_kg(rng: np.random.Generator, n: int, num_rel: int, m: int) -> KG:
    facts = np.stack([rng.integers(0, n, m), rng.integers(0, num_rel, m), rng.integers(0, n, m)])
    return KG.from_triples(n, num_rel, facts.T)


def refines(fine: np.ndarray, coarse: np.ndarray) -> bool:
    """fine ⪯ coarse: equal fine colours imply equal coarse colours."""
    fine, coarse = fine.reshape(-1), coarse.reshape(-1)
    pairs = np.unique(np.stack([fine, coarse], 1), axis=0)
    return len(np.unique(pairs[:, 0])) == len(pairs)


@pytest.mark.parametrize("seed", range(3))
def test_matches_brute_force_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n, num_rel = int(rng.integers(2, 8)), int(rng.integers(1, 4))
        kg = random_kg(rng, n, num_rel, int(rng.integers(0, 3 * n)))
        for test in TESTS:
            for rounds in range(4):
                for eta in ("diag", "const"):
                    # tiny chunks: the chunked path is the one exercised
                    got = run_test(kg, test, rounds, eta=eta, chunk_elements=5).colours
                    want = ref.run(test, n, num_rel, kg.triples(), rounds, eta)
                    if got.ndim == 2:
                        got = {k: got[k] for k in want}
                    assert ref.same_partition(want, got), (test, rounds, eta, kg.triples())


def test_stable_colouring_is_a_fixed_point() -> None:
    rng = np.random.default_rng(7)
    kg = random_kg(rng, 12, 2, 20)
    for test in TESTS:
        stable = run_test(kg, test)
        assert stable.stable and stable.num_colours[-1] == stable.num_colours[-2]
        later = run_test(kg, test, stable.rounds + 3)
        assert ref.same_partition(
            {i: c for i, c in enumerate(stable.colours.reshape(-1))}, later.colours.reshape(-1)
        )


def test_node_colours_and_eta_array() -> None:
    kg = KG.from_triples(3, 1, [[0, 0, 1], [2, 0, 1]])
    # with one node coloured apart, rwl1 separates 0 from 2; without, it cannot
    assert run_test(kg, "rwl1", 2).colours[0] == run_test(kg, "rwl1", 2).colours[2]
    col = run_test(kg, "rwl1", 2, node_colours=np.array([1, 0, 0])).colours
    assert col[0] != col[2]
    eta = np.eye(3, dtype=np.int64)
    assert (run_test(kg, "rawl2", 2, eta=eta).colours == run_test(kg, "rawl2", 2).colours).all()
    with pytest.raises(ValueError, match="unknown test"):
        run_test(kg, "rawl3")
    with pytest.raises(ValueError, match="eta must have shape"):
        run_test(kg, "rawl2", eta=np.eye(2))


@pytest.mark.parametrize("seed", range(4))
def test_hierarchy_refinements_hold_on_random_graphs(seed: int) -> None:
    """Every arrow of the paper's figure (A -> B iff A ⪯ B), and rawl_2(u, v) ⪯ rwl_1(v),
    round by round."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(5):
        kg = random_kg(rng, int(rng.integers(3, 10)), 2, int(rng.integers(2, 20)))
        for t in range(4):
            c = {test: run_test(kg, test, t).colours for test in TESTS}
            assert refines(c["rwl2+"], c["rwl2"])
            assert refines(c["rwl2+"], c["rawl2+"])
            assert refines(c["rawl2+"], c["rawl2"])
            assert refines(c["rwl2"], c["rawl2"])
            n = kg.num_nodes
            assert refines(c["rawl2"], np.broadcast_to(c["rwl1"][None, :], (n, n)))
            assert refines(c["rawl2+"], np.broadcast_to(c["rwl1+"][None, :], (n, n)))


def test_product_graph_edge_list() -> None:
    """KG.from_graph reads the model's Graph (forward + inverse edges, self-loops included)."""
    g = graph_from_triples(3, 1, torch.tensor([[0, 0, 1], [1, 0, 1]]))
    kg = KG.from_graph(g)
    assert sorted(map(tuple, kg.triples().tolist())) == [(0, 0, 1), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    aug = KG.from_triples(3, 1, [[0, 0, 1], [1, 0, 1]]).augmented()  # no inverse self-loop
    assert sorted(map(tuple, aug.triples().tolist())) == [(0, 0, 1), (1, 0, 1), (1, 1, 0)]


# Each counterexample of the paper's hierarchy figure (appendix A.5): the fixture, isolated nodes
# (--node), the two pairs, and the tests that must / must not tell them apart (stable colouring).
HIERARCHY = {
    # prop:rawl-vs-rawl+: rawl_2^+ strictly refines rawl_2 (graph G' of its proof)
    "rawl2plus_over_rawl2": ([], ("u,v", "u,v'"), {"rawl2+"}, {"rawl2"}),
    # prop:lwl2-vs-dlwl2-app: rwl_2 strictly refines rawl_2; the same graph shows rwl_2^+
    # strictly refines rawl_2^+ ("analogous", figure caption) and that rawl_2^+ does not
    # refine rwl_2 (prop:dlwlsym-lwlasym-app (2))
    "rwl2_over_rawl2": (["u", "v"], ("u,v", "u',v"), {"rwl2", "rwl2+"}, {"rawl2", "rawl2+"}),
    # prop:dlwl-2-symm-app: rwl_2^+ strictly refines rwl_2 (graph G'' of its proof)
    "rwl2plus_over_rwl2": (["v", "v'"], ("u,v", "u',v'"), {"rwl2+"}, {"rwl2"}),
    # prop:dlwlsym-lwlasym-app (1): rwl_2 does not refine rawl_2^+
    "rawl2plus_not_below_rwl2": (["u", "u'"], ("u,v", "u',v'"), {"rawl2+"}, {"rwl2"}),
    # section 5.3: rawl_2 strictly refines rwl_1 (directed 4-cycle: every node has one colour)
    "cycle4_rawl2_over_rwl1": ([], ("0,1", "0,2"), {"rawl2", "rawl2+"}, {"rwl1", "rwl1+"}),
}


def run_wl_cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI in-process (``run_cli(_main)``, what ``python -m cmpnn_dist.wl`` runs)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run_cli(_main, list(args))
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


@pytest.mark.integration
def test_cli_as_a_module() -> None:
    """``python -m cmpnn_dist.wl`` end to end in a subprocess, one human line per test."""
    proc = subprocess.run(
        [sys.executable, "-m", "cmpnn_dist.wl", str(FIXTURES / "cycle4_rawl2_over_rwl1.tsv")]
        + ["--pair", "0,1", "--pair", "0,2", "--test", "rwl1,rawl2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("rwl1 ") and lines[0].endswith("-> NOT distinguished")
    assert lines[1].startswith("rawl2 ") and lines[1].endswith("-> distinguished")
    result = json.loads(lines[-1])
    assert result["results"]["rawl2"]["groups"] == [[0], [1]]
    assert result["results"]["rwl1"]["groups"] == [[0, 1]]


@pytest.mark.parametrize("name", sorted(HIERARCHY))
def test_hierarchy_counterexamples_via_cli(name: str) -> None:
    nodes, pairs, apart, together = HIERARCHY[name]
    path = FIXTURES / f"{name}.tsv"
    args = [str(path), "--test", "all"]
    for node in nodes:
        args += ["--node", node]
    for pair in pairs:
        args += ["--pair", pair]
    proc = run_wl_cli(*args)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    for test in apart:
        assert result[test]["distinguished"], (name, test)
    for test in together:  # not even in the stable colouring: for every t
        assert not result[test]["distinguished"] and result[test]["stable"], (name, test)
    # the same verdicts from the brute-force reference, rounds 0..5
    kg, _ = read_kg(path, tuple(nodes))
    ids = [tuple(kg.node_id(x) for x in p.split(",")) for p in pairs]
    for test in apart | together:
        ref_col = ref.run(test, kg.num_nodes, kg.num_relations, kg.triples(), 5)
        if test.startswith("rwl1"):
            a = (ref_col[ids[0][0]], ref_col[ids[0][1]])
            b = (ref_col[ids[1][0]], ref_col[ids[1][1]])
        else:
            a, b = ref_col[ids[0]], ref_col[ids[1]]
        assert (a != b) == (test in apart), (name, test)
        assert distinguishes(kg, ids[0], ids[1], test=test) == (test in apart)


def test_paper_counterexamples_separate_in_one_round() -> None:
    """The propositions say the stronger test separates the pairs after one round."""
    kg, _ = read_kg(FIXTURES / "rawl2plus_over_rawl2.tsv")
    u, v, v2 = kg.node_id("u"), kg.node_id("v"), kg.node_id("v'")
    assert distinguishes(kg, (u, v), (u, v2), "rawl2+", rounds=1)
    assert not distinguishes(kg, (u, v), (u, v2), "rawl2+", rounds=0)
    kg, _ = read_kg(FIXTURES / "rwl2plus_over_rwl2.tsv", ("v", "v'"))
    p1 = (kg.node_id("u"), kg.node_id("v"))
    p2 = (kg.node_id("u'"), kg.node_id("v'"))
    assert distinguishes(kg, p1, p2, "rwl2+", rounds=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.tsv", "--pair", "a,b"], "missing.tsv: file not found"),
        (["{fx}", "--pair", "0,9"], "node '9' is not in the graph"),
        (["{fx}", "--pair", "0,1,2"], "must be HEAD,TAIL"),
        (["{fx}", "--pair", "0,1", "--test", "rawl3"], "--test 'rawl3' is not one of"),
        (["{fx}", "--pair", "0,1", "--rounds", "-1"], "--rounds must be >= 0"),
        (["{fx}", "--pair", "0,1", "--rounds", "x"], "invalid int value"),
        (["{fx}"], "required: --pair"),
        (["{bad}", "--pair", "a,b"], "line 2: expected 3 tab-separated fields"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tr\tb\na\tr\n")
    fx = str(FIXTURES / "cycle4_rawl2_over_rwl1.tsv")
    proc = run_wl_cli(*[a.format(fx=fx, bad=bad) for a in args])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert proc.stdout == ""


def test_docs_hierarchy_output_is_real() -> None:
    """Every ``$ python -m cmpnn_dist.wl ...`` block of docs/wl.md prints what the doc shows."""
    import shlex

    doc = (REPO / "docs" / "wl.md").read_text().splitlines()
    checked = 0
    for i, line in enumerate(doc):
        if not line.startswith("$ python -m cmpnn_dist.wl "):
            continue
        argv = shlex.split(line[2:].split("#")[0])[3:]
        argv[0] = str(REPO / argv[0])  # the doc's paths are relative to the repository root
        shown = []
        for nxt in doc[i + 1 :]:
            if not nxt.strip() or nxt.startswith(("$", "```")):
                break
            shown.append(nxt)
        proc = run_wl_cli(*argv)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[:-1] == shown, line
        checked += 1
    assert checked == len(HIERARCHY)
