"""Every command in the README and in the guides marked runnable (``<!-- runnable -->``) is
checked against the code, so the documentation cannot drift from it.

The fenced ``bash`` / ``sh`` / ``console`` blocks are read (console: the ``$ `` lines, each
followed by its documented output).  Each command is then, by what it is:

* **run** as written, in one scratch working directory shared by all of them in document
  order (README first), when it is cheap: ``python -m cmpnn_dist.<module>`` commands on the
  built-in data or on "your own graph" (the test writes a small ``my_graph/`` and
  ``my_graph_ind/`` holding the names the docs use), training with a step budget
  (``train.max_steps`` set or replaced, the documented ``train.max_minutes`` kept).  A
  documented ``error:`` line must be the command's last stderr line; a command the docs show
  with its output must print the documented lines (:func:`same_output`: names, ranks and
  flags equal, numbers within a float tolerance, timings aside).  The training whose run
  those outputs read (``run_name=demo`` on the built-in graph, seconds) runs as written;
* **compared**: ``head -N FILE``: the first lines of a file an earlier command wrote, against
  the lines shown;
* **composed**: a training command that needs data, a GPU or a cluster (``conf=<preset>``,
  ``cluster.*``, a ``-m`` sweep with every cell, the command inside ``ray job submit``) has its
  configuration composed and validated, which fails on a key or value that does not exist;
  evaluation and prediction commands with a placeholder (``<run>``) likewise for their
  overrides;
* **checked**: ``python -m benchmarks.<suite>.<name>`` and ``python -m benchmarks <suite>``: the
  script (or the suite) exists and every ``--option`` used is one it defines; ``python -m pytest
  PATH[::NAME]``: the test file and function exist;
* **left out**, with the reason recorded: installs, cluster and shell commands, downloads.

The reference is the code itself: the CLIs, the schema, the scripts' own argument lists.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT as REPO

MARK = "<!-- runnable -->"
BUDGET = {"train.max_steps": "12", "train.progress": "false", "eval.max_queries": "64"}
# the trainings whose runs the outputs shown in the docs read: run as written (seconds)
AS_WRITTEN = (["run_name=demo"],)
# what a run prints that no two runs share: timings (the other words and numbers are compared)
TIMINGS = [
    (re.compile(r"\bin [0-9.]+ s\b"), "in <t> s"),
    (re.compile(r"\b[0-9.]+ s in all\b"), "<t> s in all"),
    (re.compile(r"\b[0-9.]+ queries/s\b"), "<r> queries/s"),
]
TIMING_KEYS = ("seconds", "queries_per_s")
BAR = re.compile(r"^[\w ]+:\s+\d+%\|")  # a tqdm progress bar
TOLERANCE = 2e-3  # decimals of an output that no training fed (x max(1, |value|))
# the run the docs' example predictions read, trained afresh in this test: its weights, and so
# the scores, path weights and order of near ties it prints, change with the kind of CPU
# (docs/configs.md, "Across machines"), so its outputs are compared on what every CPU prints alike
TRAINED_HERE = "storage/runs/demo"
NUMBER = re.compile(r"(?<![\w:.#])-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?(?![\w.])")


@dataclass
class Command:
    source: str  # file:line
    text: str
    output: list[str] = field(default_factory=list)


def documents() -> list[Path]:
    guides = sorted(p for p in (REPO / "docs").glob("*.md") if MARK in p.read_text())
    return [REPO / "README.md", *guides]


def commands(path: Path) -> list[Command]:
    """The commands of the fenced shell blocks of ``path``, in order."""
    out: list[Command] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(bash|sh|console)\s*$", lines[i])
        i += 1
        if not fence:
            continue
        block: list[tuple[int, str]] = []
        while i < len(lines) and not lines[i].startswith("```"):
            block.append((i + 1, lines[i]))
            i += 1
        i += 1
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        if fence.group(1) == "console":
            for lineno, line in block:
                if line.startswith("$ "):
                    out.append(Command(f"{rel}:{lineno}", line[2:]))
                elif out and out[-1].source.startswith(f"{rel}:"):
                    out[-1].output.append(line)
            continue
        text, start = "", None
        for lineno, line in block:
            start = start or lineno
            if line.rstrip().endswith("\\"):
                text += line.rstrip()[:-1] + " "
                continue
            text += line
            if text.strip() and not text.strip().startswith("#"):
                out.append(Command(f"{rel}:{start}", text.strip()))
            text, start = "", None
    return out


def argv_of(text: str) -> tuple[dict[str, str], list[str]]:
    """Environment assignments and the argument vector (shell comments dropped)."""
    words = shlex.split(text, comments=True)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return env, words


LEFT_OUT = {
    "pip": "an install",
    "ray": "a Ray cluster command",
    "sbatch": "a Slurm submission",
    "kubectl": "a Kubernetes command",
    "docker": "an image build",
    "mkdir": "a shell step around data that is not here",
    "cp": "a shell step around data that is not here",
}


def classify(argv: list[str]) -> tuple[str, str]:
    """``(kind, reason)``: kind is run, compose, script, pytest, or left_out."""
    if not argv:
        return "left_out", "empty"
    if argv[0] == "cat" and len(argv) == 2:
        return "files", "the file the docs show"
    if argv[0] == "head" and len(argv) == 3 and re.fullmatch(r"-[0-9]+", argv[1]):
        return "head", "the first lines of a file a command wrote"
    if argv[0] in LEFT_OUT:
        inner = argv[argv.index("--") + 1 :] if "--" in argv else []
        if inner[:3] == ["python", "-m", "cmpnn_dist.train"]:
            return "compose", "the job's command"
        return "left_out", LEFT_OUT[argv[0]]
    if argv[0] != "python":
        return "left_out", f"{argv[0]}: a shell command"
    if argv[1:2] == ["-c"]:
        return "left_out", "a download"
    if argv[1:3] == ["-m", "venv"]:
        return "left_out", "an environment"
    if argv[1:3] == ["-m", "pytest"]:
        return "pytest", "the test suite itself"
    if argv[1:2] == ["-m"] and argv[2].split(".")[0] == "benchmarks":
        return "script", "a benchmark"
    if argv[1] != "-m" or not argv[2].startswith("cmpnn_dist."):
        return "left_out", "not a cmpnn_dist command"
    module, args = argv[2], argv[3:]
    if any("<" in a or "..." in a for a in args):
        return "compose", "a placeholder"
    if module == "cmpnn_dist.train":
        if "-m" in args or any(a.startswith(("conf=", "cluster.")) for a in args):
            return "compose", "needs data, a GPU or a cluster"
        return "run", ""
    if module == "cmpnn_dist.sweep":
        return "compose", "needs a finished sweep"
    if module == "cmpnn_dist.serve":
        return "compose", "a server runs until stopped (tests/integration/test_serve.py runs it)"
    if module == "cmpnn_dist.convert" and (
        "--raw" in args or not args or not args[0].startswith("synthetic:")
    ):
        return "left_out", "needs raw files that are not here"
    if module == "cmpnn_dist.convert" and "hetionet" in args[0]:
        return "left_out", "needs Hetionet's node table"
    return "run", ""


def write_my_graph(cwd: Path) -> None:
    """``my_graph/`` (transductive) and ``my_graph/`` + ``my_graph_ind/`` (inductive) holding
    the entity and relation names the docs use."""
    rnd = random.Random(0)
    rels = ["/film/film/genre", "/r/a", "/r/b"]

    def graph(names: list[str]) -> list[tuple[str, str, str]]:
        facts = {(names[i], rels[i % 3], names[(i + 1) % len(names)]) for i in range(len(names))}
        while len(facts) < 6 * len(names):
            h, t = rnd.sample(names, 2)
            facts.add((h, rnd.choice(rels), t))
        return sorted(facts)

    def write(folder: Path, facts: list[tuple[str, str, str]]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        cover = facts[: len(facts) // 6]  # the ring above: every entity and relation
        rest = facts[len(facts) // 6 :]
        rnd.shuffle(rest)
        k = len(rest) // 10
        splits = {"train": cover + rest[2 * k :], "valid": rest[:k], "test": rest[k : 2 * k]}
        for split, rows in splits.items():
            text = "".join(f"{h}\t{r}\t{t}\n" for h, r, t in rows)
            (folder / f"{split}.txt").write_text(text)

    seen = ["/m/0qmfz", "/m/07s9rl0", *[f"/m/e{i}" for i in range(40)]]
    write(cwd / "my_graph", graph(seen))
    write(cwd / "my_graph_ind", graph(["/m/0qmfz", *[f"/m/n{i}" for i in range(30)]]))


def _same_value(doc: object, got: object) -> bool:
    if isinstance(doc, float) or isinstance(got, float):
        try:
            a, b = float(doc), float(got)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
        return abs(a - b) <= TOLERANCE * max(1.0, abs(a))
    return doc == got


def _number(word: str) -> float | str:
    return float(word) if re.fullmatch(r"-?[0-9]+\.[0-9]+(e-?[0-9]+)?", word) else word


def same_line(doc: str, got: str) -> bool:
    """``got`` prints what ``doc`` shows: JSON lines key by key, other lines word by word
    (split at spaces and commas); decimals within :data:`TOLERANCE`, timings aside."""
    if doc.startswith("{") and got.startswith("{"):
        try:
            a, b = json.loads(doc), json.loads(got)
        except ValueError:
            return False
        keys = set(a) - set(TIMING_KEYS)
        return keys == set(b) - set(TIMING_KEYS) and all(_same_value(a[k], b[k]) for k in keys)
    for pattern, placeholder in TIMINGS:
        doc, got = pattern.sub(placeholder, doc), pattern.sub(placeholder, got)
    a, b = re.split(r"[\s,]+", doc.strip()), re.split(r"[\s,]+", got.strip())
    return len(a) == len(b) and all(
        _same_value(_number(x), _number(y)) for x, y in zip(a, b, strict=True)
    )


def terminal_lines(text: str) -> list[str]:
    """What a terminal shows of ``text``: each line's text after its last carriage return,
    without empty lines and progress bars."""
    shown = (ln.rsplit("\r", 1)[-1] for ln in text.split("\n"))
    return [ln for ln in shown if ln and not BAR.match(ln)]


def same_output(doc: list[str], out: str, err: str) -> str | None:
    """None when the command printed the documented lines: each one the next line of its
    stdout or of its stderr (the streams interleave on a terminal; our ``[cmpnn_dist]``
    notices and progress bars aside), from the first line on; the docs may stop before the
    end.  Else what differs."""
    ours = [ln for ln in terminal_lines(err) if not ln.startswith("[cmpnn_dist]")]
    streams = [out.splitlines(), ours]
    at = [0, 0]
    for line in doc:
        for i, lines in enumerate(streams):
            if at[i] < len(lines) and same_line(line, lines[at[i]]):
                at[i] += 1
                break
        else:
            nxt = [
                lines[at[i]] if at[i] < len(lines) else "<end>" for i, lines in enumerate(streams)
            ]
            return f"documented {line!r}; printed next: stdout {nxt[0]!r}, stderr {nxt[1]!r}"
    return None


def same_learned_output(doc: list[str], out: str, err: str) -> str | None:
    """:func:`same_output` for an output read from weights trained here: every documented line
    is printed, its numbers aside (each one matches any number, and the spaces that align
    them) and in any order (near ties swap on another CPU); the names, relations, flags and
    words are compared.  Else what differs."""
    printed = [" ".join(NUMBER.sub("#", ln).split()) for ln in terminal_lines(out + "\n" + err)]
    for line in doc:
        masked = " ".join(NUMBER.sub("#", line).split())  # column widths follow the numbers
        if masked not in printed:
            return f"documented {line!r} (numbers aside) is not among the printed lines {printed}"
        printed.remove(masked)
    return None


def reads_trained_here(argv: list[str]) -> bool:
    return any(a.partition("=")[2] == TRAINED_HERE or a == TRAINED_HERE for a in argv)


def with_budget(args: list[str]) -> list[str]:
    out = [a for a in args if a.partition("=")[0] not in BUDGET]
    return out + [f"{k}={v}" for k, v in BUDGET.items()]


def entry(module: str):
    """The command behind ``python -m <module>``: ``cmpnn_dist.cli.<name>``'s ``_main`` (what
    ``run_cli`` runs) or its ``main``."""
    import importlib

    name = module.removeprefix("cmpnn_dist.")
    mod = importlib.import_module(f"cmpnn_dist.cli.{'batch' if name == 'predict.batch' else name}")
    return getattr(mod, "_main", None) or mod.main


def run_in_process(module: str, args: list[str]) -> tuple[int, str, str]:
    """The command's entry point in this process: (exit status, stdout, stderr)."""
    from cmpnn_dist.cli.common import run_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main = entry(module)
        if module in ("cmpnn_dist.convert", "cmpnn_dist.storage", "cmpnn_dist.sweep"):
            try:
                status = main(args)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
        else:
            status = run_cli(main, args)
    return status, out.getvalue(), err.getvalue()


def compose_check(argv: list[str]) -> None:
    """Compose (and validate) the configuration a training / evaluation command would use."""
    from cmpnn_dist.cli.common import compose_config, split_args
    from cmpnn_dist.runs.sweep import expand

    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    module, args = argv[2], [a for a in argv[3:] if "<" not in a and "..." not in a]
    if module in ("cmpnn_dist.sweep", "cmpnn_dist.report"):
        entry(module)  # the command exists; its folder is a placeholder or needs Ray
        assert len(argv[3:]) == 1 and not argv[3].startswith("-")
        return
    if module == "cmpnn_dist.evaluate":
        _, overrides = split_args(args, ["ckpt", "weights"])
        compose_config("default", overrides)
        return
    if module == "cmpnn_dist.serve":
        from cmpnn_dist.serve.settings import PREDICT_KEYS, SERVE_KEYS, settings_from

        special, overrides = split_args(args, PREDICT_KEYS + SERVE_KEYS)
        settings_from(special, overrides, str(REPO))  # the serve.* keys and their values
        compose_config("default", overrides)
        return
    if module == "cmpnn_dist.predict":
        from cmpnn_dist.cli.predict import SPECIAL

        _, overrides = split_args(args, SPECIAL)
        compose_config("default", overrides)
        return
    assert module == "cmpnn_dist.train", argv
    multirun = "-m" in args
    args = [a for a in args if a != "-m"]
    special, overrides = split_args(args, ["conf", "sweep_name"])
    preset = special.get("conf", "default")
    if not multirun:
        compose_config(preset, overrides)
        return
    fixed, cells = expand(overrides)
    assert len(cells) > 1
    for cell in cells:
        compose_config(preset, [*fixed, *cell.overrides])


def script_check(argv: list[str]) -> None:
    module = argv[2]
    if module == "benchmarks":  # the suites' runner
        path = REPO / "benchmarks" / "__main__.py"
        suite = next((a for a in argv[3:] if not a.startswith("-")), None)
        assert suite is None or (REPO / "benchmarks" / suite / "__init__.py").is_file(), suite
    else:
        path = REPO / (module.replace(".", "/") + ".py")
    assert path.is_file(), path
    source = path.read_text()
    for option in (a.split("=")[0] for a in argv if a.startswith("--")):
        assert f'"{option}"' in source, f"{path.name} defines no {option}"


def pytest_check(argv: list[str]) -> None:
    args = argv[3:]
    for i, arg in enumerate(args):
        if arg.startswith("-") or (i and args[i - 1] == "-m"):  # an option, a marker expression
            continue
        file, _, name = arg.partition("::")
        assert (REPO / file).is_file(), file
        if name:
            assert f"def {name.split('[')[0]}(" in (REPO / file).read_text(), arg


ALL = [c for doc in documents() for c in commands(doc)]


def test_the_docs_have_commands_of_every_kind():
    kinds = {}
    for c in ALL:
        kind, _ = classify(argv_of(c.text)[1])
        kinds.setdefault(kind, []).append(c)
    assert {"run", "compose", "script", "pytest", "left_out", "files"} <= set(kinds)
    assert len(kinds["run"]) >= 15 and len(kinds["compose"]) >= 10
    assert len(documents()) >= 6  # the README and the guides marked runnable


@pytest.mark.integration
@pytest.mark.triton
def test_every_documented_command(tmp_path, monkeypatch):
    """All commands, in document order, in one scratch folder (see the module docstring).  The
    repository's ``tests/`` is linked into it (the docs name fixtures by that path), and a file
    the docs show with ``cat FILE`` is written there with the content shown."""
    import importlib.util

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CMPNN_STORAGE_ROOT", raising=False)
    write_my_graph(tmp_path)
    (tmp_path / "tests").symlink_to(REPO / "tests")
    done: set[str] = set()
    learned: set[str] = set()  # the files written from the weights trained here
    ran = compared = 0
    for c in ALL:
        env, argv = argv_of(c.text)
        kind, why = classify(argv)
        where = f"{c.source}: {c.text}"
        if kind == "left_out":
            assert why, where
            continue
        if kind == "files":
            if not (tmp_path / argv[1]).exists():
                (tmp_path / argv[1]).write_text("".join(f"{line}\n" for line in c.output))
            continue
        if kind == "head":
            lines = (tmp_path / argv[2]).read_text().splitlines()[: int(argv[1][1:])]
            compare = same_learned_output if argv[2] in learned else same_output
            assert (miss := compare(c.output, "\n".join(lines), "")) is None, (where, miss)
            continue
        if kind == "script":
            script_check(argv)
            continue
        if kind == "pytest":
            pytest_check(argv)
            continue
        if kind == "compose":
            try:
                compose_check(argv)
            except Exception as exc:  # noqa: BLE001 (reported with the command)
                pytest.fail(f"{where}\n{type(exc).__name__}: {exc}")
            continue
        error = c.output[-1] if c.output and c.output[-1].startswith("error: ") else None
        if error and "Triton" in error and importlib.util.find_spec("triton") is not None:
            continue  # that error is the message of a machine without Triton
        key = " ".join(argv)
        if key in done and not c.output:
            continue
        done.add(key)
        module, args = argv[2], argv[3:]
        if module == "cmpnn_dist.train" and not error and "--help" not in args:
            args = args + ["train.progress=false"] if args in AS_WRITTEN else with_budget(args)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        status, out, err = run_in_process(module, args)
        ran += 1
        if error:
            assert status == 2 and err.strip().splitlines()[-1] == error, (where, err[-2000:])
            continue
        assert status == 0, (where, err[-3000:])
        if module == "cmpnn_dist.wl":
            assert out.strip().splitlines()[:-1] == c.output, where
        elif c.output:
            compare = same_learned_output if reads_trained_here(args) else same_output
            assert (miss := compare(c.output, out, err)) is None, (where, miss)
            compared += 1
        if reads_trained_here(args):
            learned.update(a.partition("=")[2] for a in args if a.startswith("out="))
    assert ran >= 15 and compared >= 6


def test_the_parser_on_a_hand_made_document(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n```bash\npython -m cmpnn_dist.train \\\n    conf=trisqr   # a comment\n# only a"
        " comment\n```\n```console\n$ python -m cmpnn_dist.wl g.tsv --pair a,b\nline 1\n"
        "line 2\n$ python -m cmpnn_dist.train x=1\nerror: no\n```\n```python\nprint(1)\n```\n"
    )
    got = [(c.text, c.output) for c in commands(doc)]
    assert got == [
        ("python -m cmpnn_dist.train      conf=trisqr   # a comment", []),
        ("python -m cmpnn_dist.wl g.tsv --pair a,b", ["line 1", "line 2"]),
        ("python -m cmpnn_dist.train x=1", ["error: no"]),
    ]
    assert argv_of(got[0][0])[1] == ["python", "-m", "cmpnn_dist.train", "conf=trisqr"]
    assert classify(argv_of(got[0][0])[1])[0] == "compose"
    assert classify(["python", "-m", "cmpnn_dist.train", "run_name=x"])[0] == "run"
    assert with_budget(["train.max_steps=null", "a=1"]) == [
        "a=1", "train.max_steps=12", "train.progress=false", "eval.max_queries=64",
    ]  # fmt: skip
    assert classify(["cat", "queries.tsv"]) == ("files", "the file the docs show")


def test_output_comparison_catches_what_it_is_for():
    table = ["target  rank   head relation   tail    score  probability known",
             "  tail     1 A::203       t0  C::89 3.471334     0.969861 valid"]  # fmt: skip
    out = "\n".join([table[0], "  tail     1 A::203       t0  C::89 3.471900     0.969861 valid",
                     '{"rows": 1, "seconds": 0.02, "device": "cpu"}'])  # fmt: skip
    err = ("[cmpnn_dist] CPU message passing: compiled kernel\nscoring:  50%|##  | 1/2\r"
           "scoring: 100%|####| 2/2\npredicted 1 queries in 0.023 s on cpu")  # fmt: skip
    shown = [
        *table,
        "predicted 1 queries in 0.896 s on cpu",
        '{"rows": 1, "seconds": 9.5, "device": "cpu"}',
    ]
    assert same_output(shown, out, err) is None  # float noise, timings, notices, bars: the same
    assert same_output(table, out, err) is None  # the docs may show the output's first lines
    for wrong in (
        out.replace("C::89", "C::41"),  # another tail
        out.replace("3.471900", "3.481334"),  # a score off by 0.01
        out.replace("valid", "test"),  # another flag
        out.replace(" 1 A::203", " 2 A::203"),  # another rank
        out.replace('"rows": 1', '"rows": 2'),  # another count
    ):
        assert same_output(shown, wrong, err) is not None, wrong
    assert same_output(shown, out, err.replace("1 queries", "2 queries")) is not None
    assert same_output([table[1], table[0]], out, err) is not None  # the order counts


def test_learned_output_comparison_keeps_names_and_flags():
    """The comparison for outputs of weights trained here: what another CPU changes passes
    (scores, path weights, the order of near ties), another answer, flag or path does not."""
    shown = ["target  rank   head relation   tail    score  probability known",
             "  tail     1 A::203       t0  C::89 3.471334     0.969861 valid",
             "  tail     2 A::203       t0  C::41 3.464802     0.969670  test",
             "  #1  0.1792  A::203 -b0-> B::94 -b1-> C::21"]  # fmt: skip
    other_cpu = "\n".join([shown[0],
                           "  tail     1 A::203       t0  C::41 3.550933     0.972103  test",
                           "  tail     2 A::203       t0  C::89 3.515510     0.971126 valid",
                           "  #1  0.1226  A::203 -b0-> B::94 -b1-> C::21"])  # fmt: skip
    err = "predicted 1 queries (2 rows) in 0.005 s on cpu"
    assert same_output(shown, other_cpu, err) is not None  # the strict rule fails here
    assert same_learned_output(shown, other_cpu, err) is None
    assert same_learned_output([*shown, "predicted 1 queries (2 rows) in 9 s on cpu"],
                               other_cpu, err) is None  # fmt: skip
    for wrong in (
        other_cpu.replace("C::41", "C::77"),  # another answer
        other_cpu.replace("valid", "train"),  # another flag
        other_cpu.replace("-b0-> B::94", "-t1-> B::94"),  # another path
        other_cpu.replace("  tail     2", "  head     2"),  # another target
    ):
        assert same_learned_output(shown, wrong, err) is not None, wrong
    assert same_learned_output([shown[1], shown[1]], other_cpu, err) is not None  # once each
    assert reads_trained_here(["ckpt=storage/runs/demo", "topk=3"])
    assert reads_trained_here(["storage/runs/demo"])
    assert not reads_trained_here(["ckpt=storage/runs/mine"])
