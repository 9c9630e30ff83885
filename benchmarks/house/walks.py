"""Count what two walks through the code touch: ``predict`` to a loaded model, ``train.py``
to the first training step.

    python -m benchmarks.house.walks                 # this checkout
    PYTHONPATH=/path/to/other/checkout python -m benchmarks.house.walks   # another checkout

Each walk runs in a fresh process under ``sys.setprofile``; every call whose callee lives in
``cmpnn_dist/`` is recorded as (caller file, callee file).  Printed per walk:

* ``files``: distinct package files in which a function was called (code that an import runs,
  module bodies and registrations, does not count: that is ``imported``);
* ``imported``: package modules imported during the walk;
* ``hops``: distinct caller-file -> callee-file pairs between two package files;
* ``climbs``: those hops that go up the layer order of docs/design.md (``tests/helpers/imports.py``
  LAYERS; entry points on top) along an import: a library importing and calling a higher
  layer or an entry point.  Calls up through a registered callback (the schema running a check
  the message registry registered) are listed apart, as ``callback``: no import goes up.

The walks: (1) ``predict.loading.load_model(<checkpoint>)`` of a 3-step run of the default
preset, trained first (untraced) in a scratch folder; (2) ``train._main([...])`` on the
default preset in a fresh storage root (so the dataset is built) until the first call of
``Trainer.train_step``.  The checkout's own code is imported (whatever ``cmpnn_dist`` resolves
to); the layer map is this file's checkout's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.provenance import module_argv

HERE = Path(__file__).resolve().parent
TINY = ["train.max_steps=3", "model.num_layers=2", "model.hidden_dim=8", "eval.max_queries=4",
        "train.progress=false", "checkpoint.every_steps=3"]  # fmt: skip


class FirstStep(Exception):
    """Raised at the first training step: the walk ends there."""


def _layer_of(path: str, root: Path) -> tuple[str, int]:
    from tests.helpers import imports as _imports  # noqa: PLC0415  (the import rule's layers)

    rel = Path(path).resolve().relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    name = ".".join(parts)
    try:
        return name, _imports.layer(name)
    except KeyError:
        return name, -1


def _import_graph() -> dict[str, frozenset[str]]:
    """The imports of the checkout ``cmpnn_dist`` resolves to (AST walk of its files)."""
    import cmpnn_dist
    from tests.helpers import imports as _imports  # noqa: PLC0415

    _imports.ROOT = Path(cmpnn_dist.__file__).resolve().parents[1]
    _imports.modules.cache_clear()
    _imports.imports.cache_clear()
    return dict(_imports.imports())


def _importing(frame: object) -> bool:
    """True while an import runs this frame (an ancestor frame is importlib's machinery)."""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):
            return True
        f = f.f_back
    return False


def _trace(run: object) -> dict[str, object]:
    """Run ``run()`` under a profiler; the counts of the module docstring."""
    import cmpnn_dist

    root = Path(cmpnn_dist.__file__).resolve().parents[1]
    pkg = str(root / "cmpnn_dist")
    before = {m for m in sys.modules if m.startswith("cmpnn_dist")}
    hops: set[tuple[str, str]] = set()
    files: set[str] = set()

    def profile(frame, event, arg):  # noqa: ANN001
        if event != "call":
            return
        callee = frame.f_code.co_filename
        if not callee.startswith(pkg) or _importing(frame):
            return  # not ours, or code run by an import (module bodies, registrations)
        files.add(callee)
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        if caller.startswith(pkg) and caller != callee:
            hops.add((caller, callee))

    sys.setprofile(profile)
    try:
        run()
    except FirstStep:
        pass
    finally:
        sys.setprofile(None)
    layers = {f: _layer_of(f, root) for f in files | {c for c, _ in hops}}
    up = [(layers[a][0], layers[b][0]) for a, b in hops if layers[b][1] > layers[a][1]]
    imports = _import_graph()  # the walked checkout's imports (tests/helpers/imports.py's AST walk)

    def imported(a: str, b: str) -> bool:  # a imports b, or a package that b is part of
        return any(b == d or b.startswith(d + ".") for d in imports.get(a, ()))

    climbs = sorted(f"{a} -> {b}" for a, b in up if imported(a, b))
    callbacks = sorted(f"{a} -> {b}" for a, b in up if not imported(a, b))
    imported = {m for m in sys.modules if m.startswith("cmpnn_dist")} - before
    return {
        "files": len(files),
        "imported": len(imported),
        "hops": len(hops),
        "climbs": len(climbs),
        "climb_list": climbs,
        "callbacks": callbacks,
        "file_list": sorted(layers[f][0] for f in files),
        "hop_list": sorted(f"{layers[a][0]} -> {layers[b][0]}" for a, b in hops),
    }


def walk_predict(scratch: Path) -> dict[str, object]:
    from cmpnn_dist.runs.load import load_model

    run = scratch / "storage" / "runs" / "w"
    return _trace(lambda: load_model(run, [f"storage_root={scratch / 'storage'}"]))


def walk_train(scratch: Path) -> dict[str, object]:
    from cmpnn_dist.cli.train import _main
    from cmpnn_dist.training.trainer import Trainer

    def first_step(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        sys.setprofile(None)  # the walk ends here: the clean-up FirstStep triggers is not in it
        raise FirstStep

    Trainer.train_step = first_step
    args = [f"storage_root={scratch / 'fresh'}", "run_name=walk", *TINY]
    return _trace(lambda: _main(args))


def main() -> None:
    if len(sys.argv) == 3:  # one walk in this (fresh) process
        walk, scratch = sys.argv[1], Path(sys.argv[2])
        out = walk_predict(scratch) if walk == "predict" else walk_train(scratch)
        print(json.dumps(out))
        return
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        subprocess.run(  # the checkpoint the predict walk loads (untraced)
            [sys.executable, "-m", "cmpnn_dist.train", f"storage_root={scratch / 'storage'}",
             "run_name=w", *TINY],
            check=True, capture_output=True,
        )  # fmt: skip
        results = {}
        for walk in ("predict", "train"):
            proc = subprocess.run(
                [*module_argv(__file__), walk, str(scratch)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            results[walk] = json.loads(proc.stdout.strip().splitlines()[-1])
    import cmpnn_dist

    print(f"checkout: {Path(cmpnn_dist.__file__).resolve().parents[1]}")
    print("| walk | files | modules imported | file-to-file hops | climbs |")
    print("|---|---|---|---|---|")
    for walk, r in results.items():
        print(f"| {walk} | {r['files']} | {r['imported']} | {r['hops']} | {r['climbs']} |")
    for walk, r in results.items():
        for c in r["climb_list"]:
            print(f"climb ({walk}): {c}")
        for c in r["callbacks"]:
            print(f"callback ({walk}): {c}")


if __name__ == "__main__":
    main()
