"""The paper's readout, architecture and initialisation tables as sweeps
(``benchmarks/accuracy/paper_tables.py``, run and written by ``paper_inductive.py --table NAME``):
every cell's command composes and validates (the project's ``expand`` and ``compose_config``, no
training), the cells' conditions are the paper's rows of that table (``cmpnn_dist/paper.py``), the
readout table's first sweep is the command that was started (its archived cell keeps its name),
``table`` renders the real archived cell's numbers, and the basic table is as it was."""

from __future__ import annotations

import json

import pytest

from benchmarks.accuracy import paper_inductive, paper_tables
from benchmarks.accuracy.paper_tables import TABLES, budget, cells, conditions, paper_rows, row_of
from cmpnn_dist.paper import ENTRIES, signature
from tests.helpers.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"

READOUT_CELL = "readout_v1/train.seed=0,data=fb237_ind_v1,model.readout=none"


def test_the_tables_are_the_papers_labels():
    labels = {t.label for t in TABLES.values()}
    assert labels == {"table:readout", "inductive-table-cmpnn", "inductive-table-initialization"}
    assert labels <= {e[0] for e in ENTRIES}
    assert [len(paper_rows(t.label)) for t in TABLES.values()] == [3, 12, 4]


@pytest.mark.parametrize("name", list(TABLES))
def test_every_cell_composes_to_the_row_it_is_counted_for(name):
    """Each distinct cell (seeds aside) is composed with the preset as the sweep's trial would
    compose it; the composed config's paper signature, epochs and Hits@10_50 rule are what the
    table reads from the overrides."""
    from cmpnn_dist.cli.common import compose_config, split_args

    seen = set()
    for c in cells(TABLES[name]):
        special, over = split_args(c["overrides"], ["conf", "sweep_name"])
        over = [o for o in over if not o.startswith(("storage_root=", "train.seed="))]
        if tuple(over) in seen:
            continue
        seen.add(tuple(over))
        cfg = compose_config(special["conf"], over)
        assert {k: str(v) for k, v in signature(cfg).items()} == c["signature"], c["run"]
        assert cfg.eval.hits_negatives_rule == "paper" and cfg.eval.filter == "all"
        reduced = c["budget"].startswith("reduced")
        want = int(c["budget"].split()[1]) if reduced else 20
        assert cfg.train.epochs == want, c["run"]
    assert len(seen) >= len(paper_rows(TABLES[name].label))


@pytest.mark.parametrize("name", list(TABLES))
def test_the_cells_conditions_are_the_papers_rows(name):
    """On each split a table plans, its cells (its own and the shared ones) at the paper's
    budget make exactly the paper's rows of that table; every own cell names one row."""
    table = TABLES[name]
    rows = {tuple(sorted(cond.items())) for cond, _ in paper_rows(table.label)}
    own = cells(table, own=True)
    for split in {c["split"] for c in own}:
        got = {
            tuple(sorted(row_of(table, c["signature"]).items()))
            for c in cells(table)
            if c["split"] == split and c["budget"] == "paper"
        }
        if split.endswith(("v1",)):  # the v1 splits have every row of the table
            assert got == rows, split
        assert got <= rows
    runs = [c["run"] for c in cells(table)]
    assert len(runs) == len(set(runs))  # no cell trained twice, none read twice


def test_the_planned_seeds_and_splits():
    def plan(name: str) -> dict:
        out: dict = {}
        for c in cells(TABLES[name]):
            key = (paper_tables._name(TABLES[name], row_of(TABLES[name], c["signature"])),
                   c["split"], c["budget"])  # fmt: skip
            out.setdefault(key, set()).add(c["seed"])
        return out

    readout = plan("readout")
    assert readout["relation", "fb237_ind_v1", "paper"] == {0, 1, 2}
    assert readout["sum", "wn18rr_ind_v1", "paper"] == {0, 1, 2}
    assert readout["none", "fb237_ind_v2", "paper"] == {0}
    assert readout["relation", "fb237_ind_v4", "reduced: 4 of 20 epochs"] == {0}
    assert readout["relation", "fb237_ind_v4", "paper"] == {0}
    arch = plan("architecture")
    for msg in "123":
        for hist in "0t":
            for split in ("fb237_ind_v1", "wn18rr_ind_v1"):
                assert arch[f"sum / MSG {msg} / f(t) = {hist}", split, "paper"] == {0, 1, 2}
                assert len(arch[f"pna / MSG {msg} / f(t) = {hist}", split, "paper"]) >= 1
    init = plan("init")
    assert all(init[f"INIT {i}", s, "paper"] == {0, 1, 2} for i in "0123"
               for s in ("fb237_ind_v1", "wn18rr_ind_v1"))  # fmt: skip


def test_conditions_and_budgets_from_overrides():
    sig, extra = conditions(["conf=fb237_ind_v1", "model=pna", "data=fb237_ind_v3",
                             "train.epochs=4", "train.seed=0", "model.readout=sum"])  # fmt: skip
    assert sig["model.aggregate"] == "pna" and sig["model.readout"] == "sum"
    assert sig["data.name"] == "fb237_ind_v3" and extra == ("train.epochs=4",)
    assert budget(extra) == "reduced: 4 of 20 epochs" and budget(()) == "paper"
    assert budget(("model.prior=relations",)) is None  # the basic table's prior: no paper row
    code = ("model.readout_pool=mean", "model.readout_bias=true")
    assert budget(code) == paper_tables.PAPER_CODE_READOUT  # a variant: rows of its own
    assert budget(code[:1]) is None


def test_run_print_gives_the_readout_sweep_as_it_was_started(capsys):
    """The first readout sweep is the command the archived cell came from (its cells keep their
    names, so a store that ran it resumes them); every printed command is one sweep."""
    assert paper_inductive.main(["run", "--table", "readout", "--storage", "/S", "--print"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "python -m cmpnn_dist.train -m conf=fb237_ind_v1 model=pna train.seed=0,1,2 "
        "data=fb237_ind_v1,wn18rr_ind_v1 model.readout=none,sum,relation "
        "cluster.cpus_per_worker=1 sweep_name=readout_v1 storage_root=/S"
    )
    assert len(lines) == len(TABLES["readout"].sweeps)
    assert READOUT_CELL in paper_tables.run_names(TABLES["readout"])
    assert (TABLES["readout"].archive / READOUT_CELL / "facts.json").is_file()


def test_table_renders_the_archived_readout_cell(tmp_path):
    """``table --table readout`` on the archive as committed: each finished cell (what
    ``paper_inductive.py save`` wrote from a real run) with its own numbers beside the paper's
    (table:readout), the paper-code readout a row of its own, the rest not run."""
    assert paper_inductive.main(["table", "--table", "readout", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "paper_readout_cpu.json").read_text())
    text = (tmp_path / "paper_readout_cpu.md").read_text()
    paper = {("none", "fb237_ind_v1"): "0.804", ("relation", "fb237_ind_v1"): "0.835",
             ("sum", "fb237_ind_v1"): "0.799", ("none", "wn18rr_ind_v1"): "0.941",
             ("sum", "wn18rr_ind_v1"): "0.946", ("relation", "wn18rr_ind_v1"): "0.932"}  # fmt: skip
    archive = TABLES["readout"].archive
    finished = sorted(
        p.parent.relative_to(archive).as_posix() for p in archive.glob("*/*/results.json")
    )
    code = "readout_code_v1/data=fb237_ind_v1,model.readout=relation"  # the paper code's readout
    assert {code, READOUT_CELL, READOUT_CELL.replace("=none", "=relation")} <= set(finished)
    assert sorted(c["run"] for c in doc["cells"]) == finished
    for done in doc["cells"]:
        cell = archive / done["run"]
        res = json.loads((cell / "results.json").read_text())["test"]
        facts = json.loads((cell / "facts.json").read_text())
        assert done["test"] == res and done["facts"] == facts
        readout = done["run"].rsplit("model.readout=", 1)[1]
        split = done["run"].split("data=", 1)[1].split(",", 1)[0]
        ours = f"{res['hits@10_50']:.3f} | {facts['hits@10_50']:.3f}"
        if done["run"].startswith("readout_code_v1/"):  # a variant: its own row, not counted
            row = f"| {paper[readout, split]} | {ours} | 0 | {paper_tables.PAPER_CODE_READOUT} |"
        else:
            row = f"| {paper[readout, split]} | {ours} | 0 (planned 0, 1, 2) | the paper's |"
        assert f"| {readout} | {split} {row} paper |" in text
    own = [c for c in finished if not c.startswith("readout_code_v1/")]  # variants not counted
    assert doc["reproduced"] == len(own) >= 3 and doc["paper_cells"] == 24
    assert "| sum | fb237_ind_v1 | 0.799 | not run | not run | (planned 0, 1, 2) |" in text
    assert "- command: `python -m benchmarks.accuracy.paper_inductive run --table readout" in text
    assert "- commit: " in text and "- machine: " in text and "load: " in text


def test_the_architecture_table_reads_the_shared_rows(tmp_path):
    """Table 1's PNA / MSG 1 / f(t) = t row is the readout table's ``none`` cells, its basic
    row the eight-split table's: read from their archives, not trained again."""
    assert paper_inductive.main(["table", "--table", "architecture", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "paper_architecture_cpu.json").read_text())
    by = {(r["row"], r["split"]): r for r in doc["rows"]}
    pna = by["pna / MSG 1 / f(t) = t", "fb237_ind_v1"]
    assert pna["cells"] == [f"paper_readout_runs/{READOUT_CELL}"]
    basic = by["sum / MSG 1 / f(t) = t", "wn18rr_ind_v1"]
    assert basic["seeds"] == [0, 1, 2] and basic["paper"] == 0.932
    assert all(c.startswith("paper_inductive_runs/graIL8") for c in basic["cells"])
    assert by["sum / MSG 3 / f(t) = 0", "fb237_ind_v1"]["ours"] == []  # not run: never invented


def test_the_basic_table_is_unchanged(tmp_path):
    """``table`` (no ``--table``) writes the committed eight-split table: the same JSON, and the
    same text but the commit-and-date line (given the committed file's load)."""
    committed = (BENCH / "results" / "accuracy" / "paper_inductive_cpu.md").read_text().splitlines()
    (machine,) = [x for x in committed if x.startswith("- machine: ")]
    load = machine.split("; load: ", 1)[1]
    assert paper_inductive.main(["table", "--out", str(tmp_path), "--load", load]) == 0
    got = (tmp_path / "paper_inductive_cpu.md").read_text().splitlines()
    differ = [(a, b) for a, b in zip(committed, got, strict=True) if a != b]
    assert [a.split(" (")[0] for a, _ in differ] in ([], [committed[4].split(" (")[0]])
    assert committed[4].startswith("- commit: ")
    doc = json.loads((BENCH / "results" / "accuracy" / "paper_inductive_cpu.json").read_text())
    assert json.loads((tmp_path / "paper_inductive_cpu.json").read_text()) == doc
    names = [n for n, _ in paper_inductive.plan()]
    assert names[:3] == ["graIL8", "graIL8_seeds", "graIL8_prior"]
    assert len(paper_inductive.run_names()) == 24
