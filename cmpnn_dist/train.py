"""``python -m cmpnn_dist.train [conf=NAME] [key=value ...]``: train a C-MPNN.

With no arguments it trains on the built-in rule-planted KG (``conf/default.yaml``) on the
CPU in a few minutes.  ``conf=NAME`` picks a preset from ``conf/``; any other argument is a
Hydra override.  ``cluster.num_workers=N`` (N >= 1) runs N Ray Train workers with DDP;
otherwise training runs in this process.  The last stdout line is one JSON object:
``{"run_dir": ..., "valid": {...}, "test": {...}, ...}``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from cmpnn_dist.openmp_env import set_openmp_defaults

set_openmp_defaults()  # before torch loads OpenMP (see cmpnn_dist/openmp_env.py)

from cmpnn_dist.cli import compose_config, ensure_dataset, run_cli, split_args  # noqa: E402
from cmpnn_dist.config import Config  # noqa: E402


def default_run_name(cfg: Config) -> str:
    return f"{cfg.data.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(cfg: Config) -> dict[str, Any]:
    """Train according to ``cfg`` and return the summary printed by the CLI."""
    if cfg.run_name is None:
        cfg.run_name = default_run_name(cfg)
    path = ensure_dataset(cfg)
    if cfg.cluster.num_workers > 0:
        from cmpnn_dist.distributed import run_distributed

        return run_distributed(cfg, path)

    from cmpnn_dist.storage import open_dataset
    from cmpnn_dist.training.data import load_train_data
    from cmpnn_dist.training.loop import fit

    data = load_train_data(open_dataset(path))
    run_dir = Path(cfg.storage_root).expanduser().resolve() / "runs" / cfg.run_name
    result = fit(cfg, data, run_dir=run_dir)
    return summarize(result)


def summarize(result: Any) -> dict[str, Any]:
    out = {
        "run_dir": str(result.run_dir),
        "valid": result.best_valid,
        "test": result.test,
        "resumed_from_step": result.resumed_from_step,
    }
    print(
        f"done: {out['run_dir']}  valid mrr {result.best_valid.get('mrr', float('nan')):.4f}  "
        f"test mrr {result.test.get('mrr', float('nan')):.4f}  "
        f"hits@10 {result.test.get('hits@10', float('nan')):.4f}",
        file=sys.stderr,
    )
    return out


def _main(argv: list[str]) -> dict[str, Any]:
    special, overrides = split_args(argv, ["conf"])
    cfg = compose_config(special.get("conf", "default"), overrides)
    return train(cfg)


def main() -> None:
    sys.exit(run_cli(_main))


if __name__ == "__main__":
    main()
