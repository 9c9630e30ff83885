"""``prepare(cfg)``: everything a training run needs before its first line, done once (the start
of a run).

One call for a run in this process and for one on Ray (the command line runs it before either,
so the Ray driver repeats none of it):

1. a copy of ``cfg`` with ``run_name`` filled in (:func:`~cmpnn_dist.runs.folder.default_run_name`)
   and ``storage_root`` absolute (:func:`~cmpnn_dist.runs.folder.resolve_storage_root`: in the
   process that parsed the command line, never in a Ray worker's temporary working dir);
2. the storage root can take a run (:func:`~cmpnn_dist.runs.folder.check_storage_root`), and the
   caller's own ``checks`` pass (the Ray driver's cluster settings);
3. the dataset is built or found (:func:`~cmpnn_dist.convert.prepare.ensure_dataset`) and big
   enough for one batch (:mod:`cmpnn_dist.runs.preflight`);
4. a run that is finished for this config is recognised (``Prepared.done``, read-only);
   otherwise ``load(cfg, dataset)`` runs (what the caller needs of the data before the lock), the
   run folder is claimed (:func:`~cmpnn_dist.runs.folder.claim_run`) and the resume point is
   checked against the config.

A refusal at any step raises (one readable error) and removes what the steps created
(:func:`~cmpnn_dist.runs.preflight.undo_on_refusal`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmpnn_dist.config import Config
from cmpnn_dist.convert.prepare import dataset_path, ensure_dataset

from . import folder as rf
from . import preflight


@dataclass
class Prepared:
    """A run ready to start: ``cfg`` (the filled-in copy), ``dataset`` (its Arrow folder),
    ``sizes`` (its manifest's counts), ``run`` (the run folder, path or URI), ``done`` (the
    summary of a run already finished for this config, else None), ``claim`` (the locked run
    folder, None when done) and ``loaded`` (what ``load`` returned, None when done)."""

    cfg: Config
    dataset: Path
    sizes: dict[str, int]
    run: str
    done: dict[str, Any] | None
    claim: rf.Claim | None
    loaded: Any = None


def prepare(
    cfg: Config,
    checks: Callable[[Config], None] | None = None,
    load: Callable[[Config, Path], Any] | None = None,
) -> Prepared:
    """Run the checks of a start for ``cfg`` (left as given) and claim its run folder."""
    cfg = copy.deepcopy(cfg)
    cfg.run_name = rf.default_run_name(cfg)
    cfg.storage_root = rf.resolve_storage_root(cfg.storage_root)
    with preflight.undo_on_refusal(cfg.storage_root, dataset_path(cfg)):
        rf.check_storage_root(cfg.storage_root)
        if checks is not None:
            checks(cfg)
        path = ensure_dataset(cfg, check_size=lambda n, where: preflight.check_batch(cfg, n, where))
        sizes = preflight.check_dataset(cfg, path)
        run = rf.run_folder(cfg.storage_root, cfg.run_name)
        done = preflight.finished_summary(cfg, run, sizes)  # read-only, before the lock
        if done is not None:
            return Prepared(cfg, path, sizes, run, done, None)
        loaded = None if load is None else load(cfg, path)
        claim = rf.claim_run(run, cfg.resume)  # one run per folder (resume=false: aside)
        try:
            preflight.check_resume_point(cfg, run, sizes)
        except BaseException:
            claim.abandon()
            raise
    return Prepared(cfg, path, sizes, run, None, claim, loaded)
