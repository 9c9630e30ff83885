"""How the house reads: lines per package, the longest functions, the entry points.

    python -m benchmarks.house.house                      # this checkout
    python -m benchmarks.house.house --root /other/checkout [--top 15] [--json out.json]
    python -m benchmarks.house.house --benchmarks [--root /other/checkout]   # benchmarks/ itself

Counted from the source with an AST walk (no import): per package of ``cmpnn_dist/`` (a
top-level module counts as its own row) the files and the non-blank lines; the ``--top``
longest functions and methods (lines from ``def`` to the last line of the body); the entry
points (``__main__`` modules and modules with an ``if __name__ == "__main__"`` block); the
files over 300 lines.  The other measures of the house are the project's own tools:
``duplicates --repo cmpnn_dist`` / ``--repo benchmarks`` and ``python -m benchmarks.house.walks``
(files and hops from ``predict``'s checkpoint argument to a loaded model).

``--benchmarks`` reads ``benchmarks/`` instead, in the flat layout of scripts or in the harness
and suites: its non-blank lines (scripts, their tests), the scripts with a ``main`` of their own,
those that build their own ``argparse.ArgumentParser``, those that render Markdown tables, those
that time with ``time.perf_counter`` themselves, the imports of one script by another (the
harness aside), the homes of an atomic write (a function that writes a temporary file and
renames it), the ``sys.path`` edits, and the files git tracks under ``benchmarks/results/``:
figures, and per-run artefacts (sweep cells, kept ranks, logs) file by file.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

from benchmarks.harness.args import make_parser


def _lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def measure(root: Path, top: int = 15) -> dict:
    pkg = root / "cmpnn_dist"
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    funcs: list[tuple[int, str]] = []
    entries, long_files = [], []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(root)
        text = path.read_text()
        parts = rel.parts[1:]
        key = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py") + " (module)"
        per[key][0] += 1
        per[key][1] += _lines(text)
        if _lines(text) > 300:
            long_files.append(f"{rel} ({_lines(text)})")
        tree = ast.parse(text, str(rel))
        if path.name == "__main__.py" or '__name__ == "__main__"' in text:
            entries.append(str(rel))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                funcs.append((n, f"{rel}:{node.lineno} {node.name}"))
    funcs.sort(reverse=True)
    return {
        "packages": {k: {"files": v[0], "lines": v[1]} for k, v in sorted(per.items())},
        "total_lines": sum(v[1] for v in per.values()),
        "longest_functions": [{"lines": n, "where": w} for n, w in funcs[:top]],
        "entry_points": entries,
        "files_over_300_lines": long_files,
    }


def measure_benchmarks(root: Path) -> dict:
    bench = root / "benchmarks"
    code = [p for p in sorted(bench.rglob("*.py")) if "results" not in p.relative_to(bench).parts]
    tests = [p for p in code if "tests" in p.relative_to(bench).parts]
    scripts = [p for p in code if p not in tests]
    names = {p.stem for p in scripts}
    out = {"lines": 0, "test_lines": sum(_lines(p.read_text()) for p in tests), "shell_scripts": 0}
    counts = dict.fromkeys(("mains", "own_parsers", "markdown", "hand_timing", "sibling_imports",
                            "atomic_write_homes", "sys_path_edits"), 0)  # fmt: skip
    for path in scripts:
        text = path.read_text()
        out["lines"] += _lines(text)
        harness = "harness" in path.parts
        counts["mains"] += '__name__ == "__main__"' in text
        counts["markdown"] += "|---" in text
        counts["hand_timing"] += "perf_counter()" in text and not harness
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and not harness:
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                    node.module or ""]  # fmt: skip
                for m in mods:
                    last = m.split(".")[-1] if m.startswith("benchmarks.") else m
                    sibling = last in names and not m.startswith("benchmarks.harness")
                    counts["sibling_imports"] += sibling and last != path.stem
            if isinstance(node, ast.FunctionDef):
                body = ast.unparse(node)
                counts["atomic_write_homes"] += ".tmp" in body and ("replace(" in body) and (
                    "write" in node.name or "save" in node.name)  # fmt: skip
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                counts["sys_path_edits"] += ast.unparse(node.func.value) == "sys.path"
                own = ast.unparse(node.func) == "argparse.ArgumentParser" and not harness
                counts["own_parsers"] += own
    out["shell_scripts"] = len(list(bench.glob("*.sh")))
    out["scripts"] = len(scripts)
    out.update(counts)
    import subprocess

    tracked = subprocess.run(["git", "-C", str(root), "ls-files", "benchmarks/results"],
                             capture_output=True, text=True).stdout.split()  # fmt: skip
    runs = [f for f in tracked if any(part.endswith(("_runs", "ranks"))
                                      for part in f.split("/")[:-1])]  # fmt: skip
    out["results_files"] = len(tracked)
    out["per_run_artefact_files"] = len(runs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--benchmarks", action="store_true", help="measure benchmarks/ instead")
    args = ap.parse_args(argv)
    if args.benchmarks:
        b = measure_benchmarks(args.root)
        print("| measure | value |\n|---|---|")
        for k, v in b.items():
            print(f"| {k} | {v} |")
        if args.json:
            args.json.write_text(json.dumps(b, indent=1) + "\n")
        return 0
    m = measure(args.root, args.top)
    print("| package | files | lines |\n|---|---|---|")
    for k, v in m["packages"].items():
        print(f"| {k} | {v['files']} | {v['lines']} |")
    print(f"\ntotal: {m['total_lines']} non-blank lines\n\nlongest functions:")
    for f in m["longest_functions"]:
        print(f"  {f['lines']:4d}  {f['where']}")
    print(f"\nentry points ({len(m['entry_points'])}): " + ", ".join(m["entry_points"]))
    print(f"files over 300 lines ({len(m['files_over_300_lines'])}): "
          + ", ".join(m["files_over_300_lines"]))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
