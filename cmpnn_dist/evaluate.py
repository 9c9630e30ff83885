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

import sys
from pathlib import Path
from typing import Any

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()  # before torch loads OpenMP (see cmpnn_dist/openmp_env.py)

from cmpnn_dist.cli import run_cli, split_args  # noqa: E402
from cmpnn_dist.convert.prepare import ensure_dataset  # noqa: E402
from cmpnn_dist.errors import UsageError  # noqa: E402


def evaluate_checkpoint(path: Path, overrides: list[str], weights: str = "best") -> dict:
    import torch

    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.checkpoint import load_checkpoint
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.restore import (
        config_from_checkpoint,
        model_from_state,
        resolve_checkpoint,
        run_dir_of,
    )
    from cmpnn_dist.training.validation import check_eval_options, evaluate_splits

    ckpt = resolve_checkpoint(path)
    state = load_checkpoint(ckpt)
    cfg = config_from_checkpoint(state.get("config", {}), overrides)
    dataset = ensure_dataset(cfg)
    data = load_train_data(open_dataset(dataset))
    run_dir = run_dir_of(ckpt)
    try:
        check_eval_options(cfg, data)
        sizes = data.num_relations, data.num_nodes, data.inductive
        model = model_from_state(cfg, state, weights, *sizes)
    except ValueError as exc:
        raise UsageError(f"{ckpt}: {exc}") from exc
    out: dict[str, Any] = {"run_dir": str(run_dir), "checkpoint": str(ckpt)}
    if cfg.cluster.num_workers > 0:
        from cmpnn_dist.distributed.evaluation import run_distributed_evaluation

        del model, data
        out.update(run_distributed_evaluation(cfg, ckpt, weights, dataset, run_dir))
    else:
        device = torch.device(
            "cuda" if torch.cuda.is_available() and cfg.train.device != "cpu" else "cpu"
        )
        out.update(evaluate_splits(model, data, cfg, device, ranks_dir=run_dir))
    protocol = out["test"].get("protocol") or out["valid"].get("protocol") or "all"
    _write_json(run_dir / f"eval_{protocol}.json", out)
    print(
        f"evaluated {ckpt} ({protocol} protocol, {cfg.eval.ties} ties): "
        f"valid mrr {out['valid'].get('mrr', float('nan')):.4f}, "
        f"test mrr {out['test'].get('mrr', float('nan')):.4f}; ranks in "
        f"{run_dir}/ranks_<split>_{protocol}.parquet",
        file=sys.stderr,
    )
    return out


def _write_json(path: Path, obj: Any) -> None:
    import json
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, ["ckpt", "weights"])
    if "ckpt" not in special:
        raise UsageError(
            "usage: python -m cmpnn_dist.evaluate ckpt=PATH [weights=best|last] [key=value ...]"
        )
    weights = special.get("weights", "best")
    if weights not in ("best", "last"):
        raise UsageError(f"weights={weights!r}: choose best or last")
    return evaluate_checkpoint(Path(special["ckpt"]).expanduser(), overrides, weights)


def main() -> None:
    sys.exit(run_cli(_main))


if __name__ == "__main__":
    main()
