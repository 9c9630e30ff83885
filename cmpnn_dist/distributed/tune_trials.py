"""Run the cells of a sweep (:mod:`cmpnn_dist.runs.sweep`) as Ray Tune trials on the Ray cluster.

Why Ray Tune and not a Hydra launcher: the Ray launcher plugin for Hydra pins old Ray
releases and submits each cell through its own cluster start-up, while Tune is part of
``ray[train]`` (already a dependency), runs trials as actors on the cluster the training jobs
use, several at once within the cluster's CPUs, and reports per-trial state.  Hydra still
parses the sweep (its override grammar); Tune only schedules.

Each trial calls the training function it was given (``train_cell(preset, overrides)``, from
``cmpnn_dist.train``), which composes its cell's config and trains in the trial's process
(``train.progress=false``) with ``torch.set_num_threads(cpus_per_cell)``, and reports the
cell's metrics.  Cells are
idempotent (finished cells return their recorded results; unfinished ones resume from their
checkpoints), so the whole sweep is restarted by running the same command again.

Ctrl-C / SIGTERM: Tune's ``fit`` runs in a thread (``stop.fit_until_stopped``, as for one
distributed run), so the driver keeps the signal; it sets a :class:`~.stop.StopFlag` actor
that every trial polls (``train_cell``'s ``stop_source``): a running cell finishes its step,
checkpoints it and stops, a cell not yet begun does not begin, and the result says which
(``stopped_by``, ``stopped``, ``not_started``).  Cells still running ``cluster.
collective_timeout_s`` after the signal are stopped with the driver (``gave_up_after_s``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cmpnn_dist.runs.sweep import Cell, cell_result, sweep_dir, write_json, write_results_csv

from .driver import _init_ray
from .stop import WorkersDidNotStop, fit_until_stopped, new_stop_flag, stop_source


def _flat(result: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of a run's result as ``<split>_<metric>`` (what Tune records)."""
    out = {}
    for split in ("valid", "test"):
        for k, v in (result.get(split) or {}).items():
            if isinstance(v, int | float):  # not the protocol / tie-rule labels
                out[f"{split}_{k}"] = float(v)
    return out


# (preset, overrides, stop_source) -> the run's result
TrainCell = Callable[[str, list[str], Callable[[], int | None]], dict[str, Any]]


def _run_cell(config: dict[str, Any], train_cell: TrainCell, flag: Any) -> None:
    """The Tune trainable: train (or skip) one cell and report its metrics, or, once the
    sweep's driver asked to stop (``flag``), the step its checkpoint holds (``stopped_at``)
    or that it never began (``not_started``)."""
    import torch
    from ray import tune

    from cmpnn_dist.training.interrupt import TrainingInterrupted

    config = config["cell"]
    cell_id = config["cell_id"]
    stop = stop_source(flag)
    result = cell_result(Path(config["run_dir"]))
    if result is None:
        if stop() is not None:
            tune.report({"cell_id": cell_id, "not_started": 1.0})
            return
        torch.set_num_threads(max(1, int(config["cpus"])))
        try:
            result = train_cell(config["preset"], config["overrides"], stop)
        except TrainingInterrupted as exc:  # its step is checkpointed
            tune.report({"cell_id": cell_id, "stopped_at": float(exc.step)})
            return
    tune.report({"cell_id": cell_id, **_flat(result)})


def run_sweep(
    configs: list[Any],
    preset: str,
    fixed: list[str],
    cells: list[Cell],
    name: str,
    train_cell: TrainCell,
) -> dict[str, Any]:
    """Run every cell of the sweep ``name`` (``configs[i]``: cell i's composed config); returns
    the sweep folder, its results file, the count of finished / failed cells, and after a
    Ctrl-C / SIGTERM (``stopped_by``: the signal, else None) the cells it stopped
    (``stopped``: cell id -> checkpointed step) and those it did not begin (``not_started``).

    ``train_cell(preset, overrides, stop_source) -> result`` composes one cell's config and
    trains it in the trial's process, polling ``stop_source`` after each step (the caller's
    training function: this module never imports an entry point); it must be importable by
    name in a Ray worker (a module-level function)."""
    from ray import tune

    from cmpnn_dist.paper import signature

    cfg = configs[0]
    root = Path(cfg.storage_root).expanduser().resolve()
    folder = sweep_dir(root, name)
    cpus = max(cfg.cluster.cpus_per_worker, 1.0)
    spec_cells = []
    for cell, cell_cfg in zip(cells, configs, strict=True):
        run_name = f"{name}/{cell.cell_id}"
        overrides = [
            *fixed, *cell.overrides, f"storage_root='{root}'", f"run_name='{run_name}'",
            "train.progress=false", "resume=true",
        ]  # fmt: skip
        spec_cells.append(
            {
                "cell_id": cell.cell_id,
                "overrides": list(cell.overrides),
                "run_dir": str(root / "runs" / run_name),
                "preset": preset,
                "compose": overrides,
                "signature": signature(cell_cfg),
            }
        )
    write_json(
        folder / "sweep.json",
        {"preset": preset, "fixed": fixed, "name": name, "cells": spec_cells},
    )
    done = sum(cell_result(Path(c["run_dir"])) is not None for c in spec_cells)
    print(
        f"sweep {name}: {len(cells)} cells ({done} already finished) -> {folder}",
        file=sys.stderr,
    )
    started = _init_ray(cfg)
    signum, gave_up = None, None
    try:
        import ray

        flag = new_stop_flag()
        total_cpus = ray.cluster_resources().get("CPU", os.cpu_count() or 1)
        trials = [
            {"preset": c["preset"], "overrides": c["compose"], "run_dir": c["run_dir"],
             "cell_id": c["cell_id"], "cpus": cpus}
            for c in spec_cells
        ]  # fmt: skip
        tuner = tune.Tuner(
            tune.with_resources(
                tune.with_parameters(_run_cell, train_cell=train_cell, flag=flag), {"cpu": cpus}
            ),
            param_space={"cell": tune.grid_search(trials)},
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max(1, math.floor(total_cpus / cpus)),
                trial_name_creator=lambda t: t.config["cell"]["cell_id"][:80],
                trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
            ),
            run_config=tune.RunConfig(
                name="tune", storage_path=str(folder), verbose=0,
                failure_config=tune.FailureConfig(max_failures=cfg.cluster.max_failures),
            ),
        )  # fmt: skip
        try:
            grid, signum = fit_until_stopped(
                tuner.fit,
                lambda sig: ray.get(flag.request_stop.remote(sig)),
                grace_s=cfg.cluster.collective_timeout_s,
            )
        except WorkersDidNotStop as stuck:  # the cells stop with this driver's Ray
            grid, signum, gave_up = [], stuck.signum, stuck.grace_s
    finally:
        if started:
            import ray

            ray.shutdown()
    # "<cell id>: <the error's last line>" (the exception, not Ray's traceback around it)
    errors = [
        f"{r.config['cell']['cell_id']}: {str(r.error).strip().splitlines()[-1]}"
        for r in grid
        if r.error is not None
    ]
    metrics = [r.metrics or {} for r in grid if r.error is None]
    stopped = {m["cell_id"]: int(m["stopped_at"]) for m in metrics if "stopped_at" in m}
    not_started = [m["cell_id"] for m in metrics if "not_started" in m]
    results = write_results_csv(folder)
    finished = sum(cell_result(Path(c["run_dir"])) is not None for c in spec_cells)
    print(
        f"sweep {name}: {finished}/{len(cells)} cells finished, {len(errors)} failed; "
        f"results in {results}",
        file=sys.stderr,
    )
    return {
        "sweep_dir": str(folder),
        "results": str(results),
        "cells": len(cells),
        "finished": finished,
        "errors": errors,
        "stopped_by": signum,
        "stopped": stopped,
        "not_started": not_started,
        "gave_up_after_s": gave_up,
    }
