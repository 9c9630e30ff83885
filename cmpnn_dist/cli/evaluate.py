"""``python -m cmpnn_dist.evaluate ckpt=PATH [weights=best|last] [key=value ...]``: evaluate a
saved model.

``PATH`` is a checkpoint folder (``<run>/checkpoints/step_XXXXXXXX`` or
``<run>/checkpoints/best``), a run folder or its ``checkpoints`` folder (the newest valid
checkpoint, ``best`` included, is used); in-process and Ray runs share this layout.
``eval.protocol=all|typed|ogb`` and ``eval.ties`` pick the protocol, ``eval.max_queries`` the
budget; ``cluster.num_workers=N`` spreads the ranking over N Ray workers (each ranks its
share, rank 0 gathers).  The model is rebuilt from the configuration stored in the
checkpoint, merged with any overrides.  Which weights: a step folder's own (``weights=last``,
the default for ``.../step_N``), or the best ones by validation MRR that the checkpoint
carries (``weights=best``, the default for ``best`` and run folders); the first stderr line
says which, and of which step.

Outputs never touch the run's own files (its results.json, ranks, metrics, checkpoints): each
evaluation is one folder ``<run>/evaluations/<name>/`` (:func:`evaluation_name`: checkpoint,
weights, protocol, budget) holding ``results.json`` and ``ranks_<split>_<protocol>.parquet``,
staged and renamed into place whole.  A checkpoint whose weights do not fit the configured
model is one error line.  The last stdout line is one JSON object with ``run_dir``,
``evaluation_dir``, ``valid`` and ``test``, as for ``cmpnn_dist.train``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from cmpnn_dist.cli.common import run_cli, split_args
from cmpnn_dist.config import Config
from cmpnn_dist.convert.prepare import ensure_dataset
from cmpnn_dist.errors import UsageError

EVALUATIONS = "evaluations"
RESULTS = "results.json"
# overrides that change how fast an evaluation runs, not what it computes: not in its name
_NEUTRAL = ("cluster.", "storage_root", "train.device", "eval.batch_size", "ops.")


def evaluation_name(ckpt: str, weights: str, cfg: Config, overrides: list[str]) -> str:
    """The folder name of one evaluation: which weights, protocol and budget, e.g.
    ``best.best-weights.all-pessimistic.all-queries`` or
    ``step_00000020.last-weights.ogb-average.5-queries``; other overrides that can change
    the numbers (``model.prune.test_node_ratio=0.02``...) add ``.o-<8 hex digits>`` of them
    (listed in the folder's results.json)."""
    import hashlib

    from cmpnn_dist.storage import fs

    ev = cfg.eval
    ties = "average" if ev.protocol == "ogb" else ev.ties
    budget = "all-queries" if ev.max_queries is None else f"{ev.max_queries}-queries"
    name = f"{fs.name(ckpt)}.{weights}-weights.{ev.protocol}-{ties}.{budget}"
    named = ("eval.protocol", "eval.ties", "eval.max_queries")
    other = sorted(
        o.lstrip("+")
        for o in overrides
        if not o.lstrip("+").startswith(_NEUTRAL) and o.lstrip("+").split("=")[0] not in named
    )
    if other:
        name += ".o-" + hashlib.sha256("\n".join(other).encode()).hexdigest()[:8]
    return name


def scored_weights(state: dict[str, Any], weights: str) -> tuple[str, int]:
    """``(what was scored, the step of those weights)``: ``best`` weights when asked for and
    present (they may be of an earlier step than the checkpoint), else the checkpoint's own."""
    best = state.get("best") or {}
    if weights == "best" and best.get("state") is not None and best.get("step") is not None:
        return "best", int(best["step"])
    return "last", int(state["step"])


def evaluate_checkpoint(
    path: str | Path, overrides: list[str], weights: str | None = None
) -> dict[str, Any]:
    """Rank a checkpoint's splits and publish the outputs in their own folder
    ``<run>/evaluations/<name>/`` (:func:`evaluation_name`): ``results.json`` (metrics,
    checkpoint, weights, overrides) and ``ranks_<split>_<protocol>.parquet``.  Nothing of
    the run itself (its results.json, ranks, metrics, checkpoints) is written.  ``weights``
    None: :func:`~cmpnn_dist.runs.restore.default_weights` of ``path``."""
    import tempfile

    from cmpnn_dist.runs.restore import default_weights, load_checkpoint_config, run_dir_of
    from cmpnn_dist.storage import fs
    from cmpnn_dist.training.data import load_train_data

    weights = weights or default_weights(path)
    ckpt, state, cfg = load_checkpoint_config(path, overrides)  # read-only, whole, in memory
    dataset = ensure_dataset(cfg)
    data = load_train_data(dataset, cfg.eval.filter)
    run_loc = run_dir_of(ckpt)  # the run folder of the checkpoint read
    what, weights_step = scored_weights(state, weights)
    name = evaluation_name(ckpt, weights, cfg, overrides)
    target = fs.join(run_loc, EVALUATIONS, name)
    # outputs are staged in a temporary folder (beside the evaluations when the run folder is
    # local, so the final rename stays on one filesystem) and published as one folder at the
    # end: a killed evaluation leaves no ranks without their summary
    local_target = fs.local_path(target)
    base = None if local_target is None else local_target.parent
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
        _drop_stale_staging(base)
    stage = Path(tempfile.mkdtemp(prefix=f".tmp-eval-pid{os.getpid()}-", dir=base))
    try:
        out = _evaluate_into(stage, run_loc, ckpt, state, cfg, data, dataset, weights)
        out.update(
            evaluation_dir=target, weights=what, weights_step=weights_step,
            checkpoint_step=int(state["step"]), overrides=list(overrides),
        )  # fmt: skip
        protocol = out["test"].get("protocol") or out["valid"].get("protocol") or "all"
        _write_json(stage / RESULTS, out)
        if local_target is None:
            fs.delete_dir(target)
            fs.upload_tree(stage, target, last=RESULTS)
        else:
            _publish(stage, local_target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    from cmpnn_dist.cli.train import summary_table

    # the same table as the end of training (metrics by split, rankings, protocol and rules)
    table = summary_table(out).splitlines()[1:]
    scored = (
        f"the best weights (step {weights_step}, by valid MRR) of {ckpt}"
        if what == "best"
        else f"the weights of step {weights_step} ({ckpt})"
    )
    print(f"evaluated {scored}", *table, file=sys.stderr, sep="\n")
    print(f"  wrote {target}/ ({RESULTS}, ranks_<split>_{protocol}.parquet)", file=sys.stderr)
    return out


def _publish(stage: Path, target: Path) -> None:
    """Rename the staged folder to ``target``; an earlier evaluation of the same name is
    renamed aside first and deleted after (a kill in between leaves one of the two whole)."""
    import uuid

    old = None
    if target.exists():
        old = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
    try:
        os.replace(stage, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _drop_stale_staging(base: Path) -> None:
    """Delete the staging folders of evaluations whose process is gone (killed)."""
    import re

    from cmpnn_dist.runs.checkpoint_store import drop_dead_folders

    drop_dead_folders(base, re.compile(r"^\.tmp-eval-pid(\d+)-"))


def _evaluate_into(
    run_dir: Path, run_loc: str, ckpt: str, state: dict, cfg: Config, data: Any, dataset: Path,
    weights: str,
) -> dict[str, Any]:  # fmt: skip
    """Rank the splits (in this process or on Ray workers); per-query ranks into ``run_dir``."""
    import torch

    from cmpnn_dist.runs.restore import model_from_state
    from cmpnn_dist.training.validation import check_eval_options, evaluate_splits

    try:
        check_eval_options(cfg, data)
        sizes = data.num_relations, data.num_nodes, data.inductive
        model = model_from_state(cfg, state, weights, *sizes)
    except ValueError as exc:
        raise UsageError(f"{ckpt}: {exc}") from exc
    out: dict[str, Any] = {"run_dir": run_loc, "checkpoint": ckpt}
    if cfg.cluster.num_workers > 0:
        from cmpnn_dist.distributed.eval_pool import run_distributed_evaluation

        del model, data
        # the workers get the state read here, not the path: a live run may prune it meanwhile
        out.update(run_distributed_evaluation(cfg, state, weights, dataset, run_dir))
    else:
        device = torch.device(
            "cuda" if torch.cuda.is_available() and cfg.train.device != "cpu" else "cpu"
        )
        out.update(evaluate_splits(model, data, cfg, device, ranks_dir=run_dir))
    return out


def _write_json(path: Path, obj: Any) -> None:
    """Whole or not at all; no space left is one error naming ``path``."""
    import json

    from cmpnn_dist.storage.atomic import write_atomic

    write_atomic(path, json.dumps(obj, indent=1))


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, ["ckpt", "weights"])
    if "ckpt" not in special:
        raise UsageError(
            "usage: python -m cmpnn_dist.evaluate ckpt=PATH [weights=best|last] [key=value ...]"
        )
    weights = special.get("weights")
    if weights not in (None, "best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    ckpt = special["ckpt"]
    return evaluate_checkpoint(
        ckpt if "://" in ckpt else Path(ckpt).expanduser(), overrides, weights
    )


def main() -> None:
    sys.exit(run_cli(_main))
