"""The checks that can refuse a training run, made before anything announces it.

``python -m cmpnn_dist.train`` prints its first lines (run folder, resume command) only once
every check below has passed, so a refused run is one ``error:`` line and nothing else:

1. the dataset is big enough: a TSV source with fewer training lines than one global batch
   (``train.batch_size``) is refused before it is built (:func:`check_batch`, called by
   :func:`~cmpnn_dist.convert.prepare.ensure_dataset`); any dataset, built or cached, is
   checked again on the training-fact count of its manifest (:func:`check_dataset`);
2. the run folder is free (the run lock, :func:`~cmpnn_dist.runs.folder.claim_run`);
3. a resume continues the run that wrote the checkpoint: the newest valid checkpoint's
   config and data sizes pass the same rules the trainer applies when it restores it
   (:func:`check_resume_point`: :func:`~cmpnn_dist.runs.resume_keys.check_resume`,
   :func:`~cmpnn_dist.runs.restore.check_resumable`).

Before 2, :func:`finished_summary` recognises a run that is finished for this config: the
command then trains nothing, changes nothing and says so in one line.

:func:`undo_on_refusal` removes what the checks created (the storage root, ``datasets/``,
the dataset folder, ``runs/``) when one of them refuses the run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cmpnn_dist.config import Config, config_to_dict
from cmpnn_dist.errors import UsageError

RESULTS = "results.json"  # the summary a finished run leaves in its folder


def check_batch(cfg: Config, num_facts: int, where: str) -> None:
    """Refuse a dataset whose ``num_facts`` training facts (``where``: the file or dataset
    they were counted in) are fewer than one global batch: the sampler drops the last
    incomplete batch, so not one step could run."""
    if num_facts < cfg.train.batch_size:
        raise UsageError(
            f"{where}: {num_facts} training facts are fewer than one global batch "
            f"({cfg.train.batch_size}); lower train.batch_size"
        )


def data_sizes(dataset: str | Path) -> dict[str, int]:
    """``{"num_nodes", "num_relations", "num_train_facts"}`` of a dataset folder, read from
    its manifest: the sizes a checkpoint records (``Trainer.state()["data"]``)."""
    from cmpnn_dist.storage import format as fmt

    manifest = fmt.read_manifest(Path(dataset))
    train = manifest["graphs"]["train"]
    return {
        "num_nodes": int(train["num_nodes"]),
        "num_relations": int(manifest["num_relations"]),
        "num_train_facts": int(train["facts"]["train"]),
    }


def check_dataset(cfg: Config, dataset: str | Path) -> dict[str, int]:
    """The dataset's sizes (:func:`data_sizes`) once :func:`check_batch` passes on them."""
    sizes = data_sizes(dataset)
    check_batch(cfg, sizes["num_train_facts"], f"dataset {dataset}")
    return sizes


def check_resume_point(cfg: Config, run: str, sizes: dict[str, int]) -> None:
    """With ``cfg.resume``, refuse (CheckpointError, one line) a resume whose newest valid
    checkpoint in ``run`` was written by a run with other shaping keys, another model or
    other data (``sizes``, :func:`data_sizes`).  Run by the process holding the run's lock;
    reads only.  A run that finds no checkpoint starts fresh: nothing to check."""
    if cfg.resume:
        _checked_newest(cfg, run, sizes)


def _checked_newest(
    cfg: Config, run: str, sizes: dict[str, int], step: int | None = None
) -> tuple[int, dict[str, Any]] | None:
    """``(step, state)`` of the newest valid checkpoint of ``run`` (step folders and best)
    once it passes the resume rules for ``cfg`` (CheckpointError otherwise); None when there
    is none, or (``step`` given) when it is not of that step."""
    from .checkpoint import load_checkpoint
    from .checkpoint_store import CheckpointStore
    from .restore import check_resumable
    from .resume_keys import check_resume

    store = CheckpointStore(run, scratch_tag="preflight")
    try:
        found = store.find_latest()  # read-only; the run itself names what it skipped
        if found is None or (step is not None and found.step != step):
            return None
        state = load_checkpoint(found.path)
        now = config_to_dict(cfg)
        at = int(state["step"])
        steps_per_epoch = sizes["num_train_facts"] // cfg.train.batch_size
        check_resume(found.uri, state.get("config", {}), now, at, steps_per_epoch)
        check_resumable(found.uri, state, now.get("model"), sizes)
        return at, state
    finally:
        store.close()


def finished_summary(cfg: Config, run: str, sizes: dict[str, int]) -> dict[str, Any] | None:
    """The summary (``results.json``) of run folder ``run`` when running ``cfg`` there again
    has nothing to train: its newest valid checkpoint is the step results.json reports,
    validated, at the end this config sets (``train.epochs`` / ``max_steps``, or
    ``train.max_minutes`` spent), and it passes the resume rules.  None otherwise (the run
    goes on as a resume).  Reads only, and needs no lock: a re-run of a finished run then
    changes nothing in its folder, whenever it is stopped."""
    from cmpnn_dist.storage import fs

    from .resume_keys import total_steps

    if not cfg.resume:
        return None
    try:
        summary = json.loads(fs.read_text(fs.join(run, RESULTS)))
        step = int(summary["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent (not finished) or unreadable (the run writes it again)
    newest = _checked_newest(cfg, run, sizes, step)
    if newest is None:
        return None
    _, state = newest
    total = total_steps(
        config_to_dict(cfg)["train"], sizes["num_train_facts"] // cfg.train.batch_size
    )
    budget = cfg.train.max_minutes
    if budget and float(state.get("train_seconds", 0.0)) >= 60.0 * budget:
        total = min(total, step)
    if step < total or state.get("last_valid_step") != step:
        return None
    return summary


@contextlib.contextmanager
def undo_on_refusal(storage_root: str, dataset: Path) -> Iterator[None]:
    """Run the checks of a start; if one raises, remove what did not exist before: the
    ``dataset`` folder (built by this start), and the storage root, its ``datasets/`` and
    ``runs/`` folders when they are empty.  A URI storage root is left alone (its dataset
    lives in the local cache folder, ``dataset``)."""
    from cmpnn_dist.storage import fs

    root = fs.local_path(storage_root)
    folders = [] if root is None else [root, root / "datasets", root / "runs"]
    new_folders = [p for p in folders if not p.exists()]
    new_dataset = not dataset.exists()
    try:
        yield
    except BaseException:
        if new_dataset and dataset.is_dir():
            shutil.rmtree(dataset, ignore_errors=True)
        for p in reversed(new_folders):
            _rmdir_if_empty(p)
        raise


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
