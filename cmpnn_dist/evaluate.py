"""``python -m cmpnn_dist.evaluate ckpt=PATH [key=value ...]``: evaluate a saved model.

``PATH`` is a checkpoint folder (``<run>/checkpoints/step_XXXXXXXX`` or
``<run>/checkpoints/best``), a run folder or its ``checkpoints`` folder (the newest valid
checkpoint is used); in-process and Ray runs share this layout.  ``eval.protocol=all|typed|ogb``
and ``eval.ties`` pick the protocol; ``cluster.num_workers=N`` spreads the ranking over N Ray
workers (each ranks its share, rank 0 gathers).  Per-query ranks go to
``<run>/ranks_<split>_<protocol>.parquet`` and the metrics to ``<run>/eval_<protocol>.json``.
The model is rebuilt from the configuration stored in the checkpoint, merged with any
overrides; the best weights (by
validation MRR) are evaluated, or the checkpoint's current weights with ``weights=last``.
A checkpoint whose weights do not fit the configured model is one error line.  The last
stdout line is one JSON object with ``run_dir``, ``valid`` and ``test``, as for
``cmpnn_dist.train``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()  # before torch loads OpenMP (see cmpnn_dist/openmp_env.py)

from cmpnn_dist.cli import run_cli, split_args  # noqa: E402
from cmpnn_dist.config import Config  # noqa: E402
from cmpnn_dist.convert.prepare import ensure_dataset  # noqa: E402
from cmpnn_dist.errors import UsageError  # noqa: E402


def evaluate_checkpoint(path: str | Path, overrides: list[str], weights: str = "best") -> dict:
    import tempfile

    from cmpnn_dist.storage import fs
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.restore import load_checkpoint_config, run_dir_of

    ckpt, state, cfg = load_checkpoint_config(path, overrides)  # read-only, whole, in memory
    dataset = ensure_dataset(cfg)
    data = load_train_data(dataset, cfg.eval.filter)
    run_loc = run_dir_of(ckpt)  # the run folder of the checkpoint read
    # outputs are staged in a temporary folder (inside the run folder when it is local, so
    # the final renames stay on one filesystem) and published together at the end, the
    # eval_<protocol>.json last: a killed evaluation leaves no ranks without their summary
    local_run = fs.local_path(run_loc)
    if local_run is not None:
        local_run.mkdir(parents=True, exist_ok=True)
        _drop_stale_staging(local_run)
    run_dir = Path(tempfile.mkdtemp(prefix=f".tmp-eval-pid{os.getpid()}-", dir=local_run))
    try:
        out = _evaluate_into(run_dir, run_loc, ckpt, state, cfg, data, dataset, weights)
        protocol = out["test"].get("protocol") or out["valid"].get("protocol") or "all"
        summary = f"eval_{protocol}.json"
        _write_json(run_dir / summary, out)
        if local_run is None:
            fs.upload_tree(run_dir, run_loc, last=summary)
        else:
            names = sorted(p.name for p in run_dir.iterdir() if p.name != summary)
            for name in [*names, summary]:
                os.replace(run_dir / name, local_run / name)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    from cmpnn_dist.train import summary_table

    # the same table as the end of training (metrics by split, rankings, protocol and rules)
    table = summary_table(out).splitlines()[1:]
    print(f"evaluated {ckpt}", *table, file=sys.stderr, sep="\n")
    print(f"  ranks: {run_loc}/ranks_<split>_{protocol}.parquet", file=sys.stderr)
    return out


def _drop_stale_staging(run: Path) -> None:
    """Delete the staging folders of evaluations whose process is gone (killed)."""
    import re

    from cmpnn_dist.training.checkpoint_store import drop_dead_folders

    drop_dead_folders(run, re.compile(r"^\.tmp-eval-pid(\d+)-"))


def _evaluate_into(
    run_dir: Path, run_loc: str, ckpt: str, state: dict, cfg: Config, data: Any, dataset: Path,
    weights: str,
) -> dict[str, Any]:  # fmt: skip
    """Rank the splits (in this process or on Ray workers); per-query ranks into ``run_dir``."""
    import torch

    from cmpnn_dist.training.restore import model_from_state
    from cmpnn_dist.training.validation import check_eval_options, evaluate_splits

    try:
        check_eval_options(cfg, data)
        sizes = data.num_relations, data.num_nodes, data.inductive
        model = model_from_state(cfg, state, weights, *sizes)
    except ValueError as exc:
        raise UsageError(f"{ckpt}: {exc}") from exc
    out: dict[str, Any] = {"run_dir": run_loc, "checkpoint": ckpt}
    if cfg.cluster.num_workers > 0:
        from cmpnn_dist.distributed.evaluation import run_distributed_evaluation

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
    weights = special.get("weights", "best")
    if weights not in ("best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    ckpt = special["ckpt"]
    return evaluate_checkpoint(
        ckpt if "://" in ckpt else Path(ckpt).expanduser(), overrides, weights
    )


def main() -> None:
    sys.exit(run_cli(_main))


if __name__ == "__main__":
    main()
