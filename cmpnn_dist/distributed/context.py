"""``RayTrainContext``: the :class:`~cmpnn_dist.training.context.TrainContext` of a Ray worker.

Checkpoint flow (rank 0 writes, every rank reads):

* the loop writes the checkpoint of step ``s`` into ``checkpoint_path(s)``, a folder in this
  worker's local scratch directory, and passes it to ``report`` once it is complete;
* ``report`` re-verifies its manifest (size and sha256 of every file: a checkpoint that failed
  to write is never reported) and hands it to ``ray.train.report``, which copies it to
  ``<storage_path>/<run_name>/step_<s:08d>-<token>`` and keeps the newest
  ``checkpoint.keep_last`` (Ray's ``CheckpointConfig(num_to_keep)``); the checkpoint with the
  best ``manifest.meta.score`` is also copied to ``<run>/best``;
* ``latest_checkpoint`` lists the ``step_*`` folders of the run (so it works in a restarted
  worker group, in a job submitted again with the same ``run_name``, and on ``s3://``), newest
  step first, and returns the first whose manifest verifies; torn ones are skipped with a
  warning naming them.  Rank 0 decides and broadcasts the choice, so every rank resumes from
  the same checkpoint.

Metrics: the loop reports one row per step on every rank.  Rows go to ``metrics.csv`` and
TensorBoard in the run folder (rank 0, through a ``LocalContext``); ``ray.train.report`` (a
barrier across workers) is called only for rows that carry a checkpoint -- rank 0 tells the
others with a one-integer broadcast.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import ray.train
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from cmpnn_dist.training.checkpoint import read_manifest
from cmpnn_dist.training.context import LocalContext

from . import faults, remote
from .resume import fetch_checkpoint, select_checkpoint
from .timing import StepTimer

logger = logging.getLogger(__name__)

BEST_DIR = "best"


def _plain(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def all_gather_rows(t: Tensor, device: torch.device) -> Tensor:
    """All-gather of tensors whose first dimension differs between ranks (pad to the largest,
    gather on ``device``, cut each back); returns the concatenation on ``t``'s device."""
    world = dist.get_world_size()
    n = torch.tensor([t.shape[0]], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n)
    counts = [int(s.item()) for s in sizes]
    padded = torch.zeros((max(counts), *t.shape[1:]), dtype=t.dtype, device=device)
    padded[: t.shape[0]] = t.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(t.device)


class RayTrainContext:
    """TrainContext of one Ray Train worker (DDP over the process group Ray set up).

    Args:
        run_uri: the run folder ``<storage_path>/<run_name>`` (local path or URI).
        resume: False ignores existing checkpoints (the driver moved them aside already).
        keep_last: unused here (Ray prunes); kept for symmetry with ``LocalContext``.
        use_gpu: train on this worker's GPU (``ray.train.torch.get_device()``).
        find_unused_parameters: passed to DDP (True tolerates parameters a model variant
            leaves unused, at the cost of one graph traversal per step).
    """

    def __init__(
        self,
        run_uri: str,
        resume: bool = True,
        use_gpu: bool = False,
        find_unused_parameters: bool = True,
        tensorboard: bool = True,
    ) -> None:
        tc = ray.train.get_context()
        self.rank = tc.get_world_rank()
        self.world_size = tc.get_world_size()
        if use_gpu:
            from ray.train.torch import get_device

            self.device = get_device()
        else:
            self.device = torch.device("cpu")
        self.run_uri = run_uri
        self.resume = resume
        self.find_unused_parameters = find_unused_parameters
        self.scratch = Path(tempfile.mkdtemp(prefix=f"cmpnn-rank{self.rank}-"))
        self.resumed_from_step: int | None = None
        self.resumed_from: str | None = None
        self.timer = StepTimer()
        self.timings: dict[str, float] = defaultdict(float)
        self._best_score: float | None = None
        self._save_started: float | None = None
        self._restore_started: float | None = None
        self._metrics: LocalContext | None = None
        # where rank 0 writes metrics.csv, TensorBoard and fit's results.json: the run folder
        # itself on a local / shared filesystem, else scratch (copied up at checkpoints)
        self.run_dir: Path | None = None
        if self.is_main:
            self.run_dir = Path(run_uri) if not remote.is_uri(run_uri) else self.scratch / "run"
            self._metrics = LocalContext(
                self.run_dir, self.device, resume=True, tensorboard=tensorboard
            )
            self._best_score = self._saved_best_score()

    # ------------------------------------------------------------------ topology
    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _distributed(self) -> bool:
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """DDP(model): broadcasts rank 0's parameters, averages gradients in backward."""
        model = model.to(self.device)
        faults.install(model, self.rank)
        if self._distributed():
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(
                model, device_ids=ids, find_unused_parameters=self.find_unused_parameters
            )
        self.timer.attach(model)
        return model

    def all_reduce_mean(self, t: Tensor) -> Tensor:
        """Mean of ``t`` over ranks (a new tensor; identity copy on one worker)."""
        out = t.detach().clone()
        if not self._distributed():
            return out
        start = time.perf_counter()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        self.timings["all_reduce_metrics"] += time.perf_counter() - start
        return out / self.world_size

    def all_gather_rows(self, t: Tensor) -> Tensor:
        """Every rank's rows ``t`` [n_k, ...] concatenated in rank order (sharded evaluation)."""
        if not self._distributed():
            return t
        start = time.perf_counter()
        out = all_gather_rows(t, self.device)
        self.timings["all_gather_eval"] += time.perf_counter() - start
        return out

    def _broadcast_object(self, obj: Any) -> Any:
        if not self._distributed():
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_path(self, step: int) -> Path:
        # the loop writes the checkpoint right after asking for its path and reports it right
        # after writing: the time in between is the checkpoint save (state_dicts + torch.save)
        self._save_started = time.perf_counter()
        return self.scratch / "checkpoints" / f"step_{step:08d}"

    def latest_checkpoint(self) -> Path | None:
        """The checkpoint every rank resumes from (rank 0 chooses, the others follow)."""
        choice = None
        if self.is_main and self.resume:
            found = select_checkpoint(self.run_uri, self.scratch)
            if found is not None:
                local, manifest, name = found
                choice = (name, manifest.get("step"))
        choice = self._broadcast_object(choice)
        self._restore_started = time.perf_counter()
        if choice is None:
            return None
        name, step = choice
        self.resumed_from = remote.join(self.run_uri, name)
        self.resumed_from_step = step
        if self.is_main:
            msg = f"resuming from step {step}: {self.resumed_from}"
            logger.warning(msg)
            print(f"[cmpnn_dist] {msg}", flush=True)
            return local
        return fetch_checkpoint(self.run_uri, name, self.scratch)

    def on_resume(self, history: list[dict[str, Any]], step: int) -> None:
        if self._restore_started is not None:  # load_checkpoint + load_state_dicts
            self.timings["checkpoint_restore"] += time.perf_counter() - self._restore_started
        self.resumed_from_step = step
        if self._metrics is not None:
            self._metrics.on_resume(history, step)

    def report(self, metrics: dict[str, Any], checkpoint_dir: Path | None) -> None:
        """Log a history row; rows with a checkpoint go through ``ray.train.report``."""
        row = _plain(dict(metrics))
        if self._metrics is not None:
            self._metrics.report(row, None)
        manifest = None
        if checkpoint_dir is not None and self.is_main:
            if self._save_started is not None:
                self.timings["checkpoint_save"] += time.perf_counter() - self._save_started
                self.timings["checkpoint_saves"] += 1
                self._save_started = None
            manifest = read_manifest(Path(checkpoint_dir), verify_checksums=True)
        has_ckpt = self._broadcast_flag(manifest is not None)
        if not has_ckpt:
            return
        start = time.perf_counter()
        ckpt = name = None
        if manifest is not None:
            step = int(manifest.get("step") or row.get("step") or 0)
            name = f"step_{step:08d}-{uuid.uuid4().hex[:8]}"
            ckpt = ray.train.Checkpoint.from_directory(str(checkpoint_dir))
        ray.train.report(row, checkpoint=ckpt, checkpoint_dir_name=name)
        if manifest is not None:
            self._maybe_keep_best(Path(checkpoint_dir), manifest)
            self._sync_metrics_file()
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
        self.timings["checkpoint_report"] += time.perf_counter() - start
        if manifest is not None:
            self.timings["checkpoint_bytes"] = float(
                sum(f["size"] for f in manifest["files"].values())
            )

    def _broadcast_flag(self, flag: bool) -> bool:
        if not self._distributed():
            return flag
        t = torch.tensor([int(flag)], device=self.device)
        dist.broadcast(t, src=0)
        return bool(t.item())

    def _saved_best_score(self) -> float | None:
        """Score of ``<run>/best`` left by an earlier attempt (so a restart keeps the best)."""
        uri = remote.join(self.run_uri, BEST_DIR, "manifest.json")
        if not self.resume or not remote.exists(uri):
            return None
        try:
            score = json.loads(remote.read_text(uri)).get("meta", {}).get("score")
        except ValueError:
            return None
        return float(score) if isinstance(score, (int, float)) else None

    def _maybe_keep_best(self, local: Path, manifest: dict[str, Any]) -> None:
        score = (manifest.get("meta") or {}).get("score")
        if not isinstance(score, (int, float)):
            return
        if self._best_score is not None and score <= self._best_score:
            return
        self._best_score = float(score)
        dst = remote.join(self.run_uri, BEST_DIR)
        fs, path = remote.filesystem(dst)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        import pyarrow.fs as pafs

        fs.create_dir(tmp, recursive=True)
        pafs.copy_files(
            str(local), tmp, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs
        )
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            fs.delete_dir(path)
        fs.move(tmp, path)

    def _sync_metrics_file(self) -> None:
        if self._metrics is None or not remote.is_uri(self.run_uri):
            return
        csv_path = self._metrics.csv_path
        if csv_path.exists():
            remote.write_text(remote.join(self.run_uri, "metrics.csv"), csv_path.read_text())

    def close(self) -> None:
        if self._metrics is not None:
            self._sync_metrics_file()
            self._metrics.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
