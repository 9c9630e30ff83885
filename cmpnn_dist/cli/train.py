"""``python -m cmpnn_dist.train [conf=NAME] [key=value ...]``: train a C-MPNN.

With no arguments it trains on the built-in rule-planted KG (``conf/default.yaml``) on the
CPU in a few minutes.  ``conf=NAME`` picks a preset from ``conf/``; any other argument is a
Hydra override.  ``cluster.num_workers=N`` (N >= 1) runs N Ray Train workers with DDP;
otherwise training runs in this process.  The last stdout line is one JSON object:
``{"run_dir": ..., "valid": {...}, "test": {...}, ...}``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from cmpnn_dist.cli.common import compose_config, run_cli, split_args
from cmpnn_dist.config import Config
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.errors import UsageError
from cmpnn_dist.evaluation.metrics import RESULT_LABELS


def train(
    cfg: Config,
    argv: Sequence[str] = (),
    stop_source: Callable[[], int | None] | None = None,
) -> dict[str, Any]:
    """Train according to ``cfg`` and return the summary printed by the CLI.  ``stop_source``
    (a run in this process): stop requests made outside it (a sweep's cell: its driver's).

    ``cfg`` itself is left as given: the run works on a copy whose ``run_name`` is filled in
    (``<data.name>-<time>`` when null) and whose ``storage_root`` is absolute (resolved here,
    never in a Ray worker's temporary working dir).

    Every check that can refuse the run (:func:`cmpnn_dist.runs.start.prepare`: storage
    root, cluster settings, dataset, data size, run lock, resume compatibility) comes before
    the run's first lines; a refused run removes what those checks created.  A run that is
    finished for ``cfg`` (:func:`~cmpnn_dist.runs.preflight.finished_summary`) trains nothing
    and writes nothing: one line says so and its ``results.json`` is returned (``nothing_trained``).
    Otherwise, after the first lines, one warning when ``train.remove_query_edges`` hides the
    inverse facts of the data's inverse relation pairs
    (:mod:`cmpnn_dist.training.edge_removal`)."""
    from cmpnn_dist.runs import folder as rf
    from cmpnn_dist.runs.start import prepare
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.edge_removal import dataset_edge_removal_warning

    distributed = cfg.cluster.num_workers > 0

    def ray_checks(cfg: Config) -> None:
        from cmpnn_dist.distributed.driver import backend_for, check_settings

        check_settings(cfg)
        backend_for(cfg)

    def load(cfg: Config, path: Any) -> tuple[str | None, Any]:  # before the lock
        warning = dataset_edge_removal_warning(cfg.train.remove_query_edges, path)
        return warning, None if distributed else load_train_data(path, cfg.eval.filter)

    ready = prepare(cfg, checks=ray_checks if distributed else None, load=load)
    cfg, path, run, done, claim = ready.cfg, ready.dataset, ready.run, ready.done, ready.claim
    warning, data = ready.loaded or (None, None)
    lines = rf.banner(run, cfg.storage_root, argv, cfg.run_name)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    if done is not None:  # finished: nothing trained, nothing written
        print(
            f"nothing to train: run {cfg.run_name!r} finished at step {done['step']} "
            f"({run}/results.json, left as it is); a longer train.max_steps or train.epochs "
            "continues it, resume=false starts it afresh",
            file=sys.stderr,
            flush=True,
        )
        print(summary_table(done), file=sys.stderr)
        return {**done, "nothing_trained": True}
    if warning is not None:  # the data has inverse relation pairs that this mode hides
        print(warning, file=sys.stderr, flush=True)
    from cmpnn_dist.training.interrupt import TrainingInterrupted

    if distributed:
        from cmpnn_dist.distributed import run_distributed

        try:
            return run_distributed(cfg, path, claim=claim)
        except TrainingInterrupted as exc:  # the workers checkpointed; one line, 130 / 143
            exc.resume = lines[1].removeprefix("resume with: ")
            raise

    from cmpnn_dist.training.loop import fit

    try:
        result = fit(cfg, data, run_dir=run, stop_source=stop_source)
    except TrainingInterrupted as exc:  # Ctrl-C / SIGTERM: checkpointed; one line, 130 / 143
        exc.resume = lines[1].removeprefix("resume with: ")
        raise
    except BaseException:
        claim.abandon()  # a start that left no checkpoint leaves no folder
        raise
    finally:
        claim.release()
    return summarize(result)


def summarize(result: Any) -> dict[str, Any]:
    out = {
        "run_dir": str(result.run_dir),
        "valid": result.best_valid,
        "test": result.test,
        "resumed_from_step": result.resumed_from_step,
    }
    print(summary_table(out), file=sys.stderr)
    return out


def summary_table(out: dict[str, Any]) -> str:
    """The end-of-run table a person reads: each metric's best-valid and test value, then the
    ranking counts and the protocol / tie rule they were computed under."""
    splits = [s for s in ("valid", "test") if out.get(s)]
    numeric = {s: {k: v for k, v in out[s].items() if isinstance(v, int | float)} for s in splits}
    first = ("mrr", "hits@1", "hits@3", "hits@10", "hits@10_50", "mr")
    keys = [k for k in first if any(k in numeric[s] for s in splits)]
    counts = {"num_queries", "num_pairs"}
    keys += sorted({k for s in splits for k in numeric[s]} - set(keys) - counts)
    lines = [f"done: {out['run_dir']}"]
    if splits:
        lines.append(f"  {'metric':<12}" + "".join(f"{s:>10}" for s in splits))
        for k in keys:
            cells = "".join(
                f"{numeric[s][k]:>10.4f}" if k in numeric[s] else f"{'-':>10}" for s in splits
            )
            lines.append(f"  {k:<12}{cells}")
        queries = [f"{s} {int(numeric[s].get('num_queries', 0))}" for s in splits]
        how = {f"{k} {out[s][k]}" for s in splits for k in RESULT_LABELS if k in out[s]}
        extra = f"; {', '.join(sorted(how))}" if how else ""
        lines.append(f"  rankings: {', '.join(queries)} (both directions{extra})")
    return "\n".join(lines)


def _main(argv: list[str]) -> dict[str, Any]:
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    argv = [arg for arg in argv if arg not in ("-m", "--multirun")]
    special, overrides = split_args(argv, ["conf", "sweep_name"])
    preset = special.get("conf", "default")
    if multirun:
        if "sweep_name" in special:
            from cmpnn_dist.config import check_store_name

            check_store_name("sweep_name", special["sweep_name"])
        return sweep(preset, overrides, special.get("sweep_name"))
    if "sweep_name" in special:
        raise UsageError("sweep_name= names a sweep: use it with -m / --multirun")
    cfg = compose_config(preset, overrides)
    return train(cfg, argv)


def sweep(preset: str, overrides: list[str], name: str | None) -> dict[str, Any]:
    """``-m``: every cell of the sweep as a Ray Tune trial (see :mod:`cmpnn_dist.runs.sweep`).
    Every cell's config is composed and checked before anything runs; each dataset is built
    once, before the cells start.  Cells that fail do not stop the others: the sweep ends,
    then :class:`~cmpnn_dist.runs.sweep.CellsFailed` names them (exit status 1).  Ctrl-C / SIGTERM:
    the running cells checkpoint their step, no other cell starts, and
    :class:`~cmpnn_dist.runs.sweep.SweepInterrupted` names them (exit status 130 / 143)."""
    from cmpnn_dist.runs.sweep import CellsFailed, SweepInterrupted, default_sweep_name, expand

    try:
        fixed, cells = expand(overrides)
    except Exception as exc:  # Hydra's grammar errors: one line
        raise UsageError(f"bad sweep override: {' '.join(str(exc).split())}") from exc
    configs = [compose_config(preset, [*fixed, *cell.overrides]) for cell in cells]
    from cmpnn_dist.storage import fs

    for c in configs:  # the sweep reads its cells' results.json from the storage root
        local = fs.local_path(c.storage_root)
        if local is None:
            raise UsageError(
                f"storage_root={c.storage_root}: a sweep needs a local or file:// storage root "
                "(its cells' results are read back from it); run single runs on this URI"
            )
        c.storage_root = str(local)
    if any(c.cluster.num_workers for c in configs):
        raise UsageError(
            "a sweep runs each cell in one Ray Tune trial: cluster.num_workers must be 0 "
            "(give the cells CPUs with cluster.cpus_per_worker)"
        )
    seen: set[str] = set()
    for c in configs:
        if c.data.name not in seen:
            seen.add(c.data.name)
            ensure_dataset(c)
    from cmpnn_dist.distributed.tune_trials import run_sweep

    # this module is always imported by its name (the ``-m`` alias imports it), so Ray pickles
    # ``train_cell`` as a reference to ``cmpnn_dist.cli.train``
    result = run_sweep(
        configs, preset, fixed, cells, name or default_sweep_name(preset), train_cell
    )
    if result["stopped_by"] is not None:  # Ctrl-C / SIGTERM: the running cells checkpointed
        raise SweepInterrupted(result)
    if result["errors"]:
        raise CellsFailed(result)
    return result


def train_cell(
    preset: str, overrides: list[str], stop_source: Callable[[], int | None] | None = None
) -> dict[str, Any]:
    """One sweep cell, in its Ray Tune trial: compose its config and train it (a finished run
    is skipped by the caller; an unfinished one resumes from its checkpoints).  A stop request
    of the sweep's driver (``stop_source``) checkpoints the cell and raises
    :class:`~cmpnn_dist.training.interrupt.TrainingInterrupted`."""
    return train(compose_config(preset, overrides), stop_source=stop_source)


def main() -> None:
    sys.exit(run_cli(_main))
