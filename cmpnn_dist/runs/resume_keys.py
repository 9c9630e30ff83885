"""Which config keys a resumed run may change: the resume-key check of a checkpoint.

A checkpoint continues the run that wrote it only when the keys that shape that run are the
same: every ``model.*`` key, and ``train.{seed, lr, batch_size, num_negatives, negatives,
adversarial_temperature, lr_schedule, warmup_steps, precision, remove_query_edges}``.  A
change is one error naming each key (``train.lr: 0.005 in the checkpoint, 0.01 now``), raised
as :class:`~cmpnn_dist.runs.checkpoint.CheckpointError` (exit status 2, never retried).

The run's length (``train.epochs``, ``train.max_steps``) may change:

* extended (the new total step count is above the checkpoint's step) with a constant learning
  rate after warmup: accepted with one line saying so;
* with ``train.lr_schedule`` cosine / linear the schedule is stretched over the new total, so
  the rates of the resumed steps differ from the interrupted run's: an error;
* shortened below the checkpoint's step: an error (the checkpoint is past the end).
"""

from __future__ import annotations

from typing import Any

from .checkpoint import CheckpointError

SHAPING_TRAIN_KEYS = (
    "seed",
    "lr",
    "batch_size",
    "num_negatives",
    "negatives",
    "adversarial_temperature",
    "lr_schedule",
    "warmup_steps",
    "precision",
    "remove_query_edges",
)
LENGTH_KEYS = ("epochs", "max_steps")


def _flat(d: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in (d or {}).items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def changed_keys(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"key: A in the checkpoint, B now"`` for each run-shaping key that differs."""
    old = {**_flat(saved.get("model", {}), "model."), **_flat(saved.get("train", {}), "train.")}
    new = {**_flat(now.get("model", {}), "model."), **_flat(now.get("train", {}), "train.")}
    keys = [k for k in new if k.startswith("model.")]
    keys += [f"train.{k}" for k in SHAPING_TRAIN_KEYS]
    return [
        f"{k}: {old.get(k)!r} in the checkpoint, {new.get(k)!r} now"
        for k in keys
        if k in old and old.get(k) != new.get(k)
    ]


def total_steps(train: dict[str, Any], steps_per_epoch: int) -> int:
    total = steps_per_epoch * int(train["epochs"])
    if train.get("max_steps") is not None:
        total = min(total, int(train["max_steps"]))
    return total


def check_resume(
    path: Any, saved: dict[str, Any], now: dict[str, Any], step: int, steps_per_epoch: int
) -> str | None:
    """Refuse (CheckpointError) a resume that changes how the run trains; return a line to
    print when the run's length changed in a way that is safe, else None."""
    problems = changed_keys(saved, now)
    old_train, new_train = saved.get("train", {}), now.get("train", {})
    note = None
    if "epochs" in old_train and any(old_train.get(k) != new_train.get(k) for k in LENGTH_KEYS):
        old_total = total_steps(old_train, steps_per_epoch)
        new_total = total_steps(new_train, steps_per_epoch)
        what = ", ".join(
            f"train.{k} {old_train.get(k)!r} -> {new_train.get(k)!r}"
            for k in LENGTH_KEYS
            if old_train.get(k) != new_train.get(k)
        )
        if new_total < step:
            problems.append(
                f"{what}: the run would end at step {new_total}, before the checkpoint's "
                f"step {step}"
            )
        elif new_total != old_total and new_train.get("lr_schedule", "constant") != "constant":
            problems.append(
                f"{what}: train.lr_schedule={new_train['lr_schedule']} would stretch the "
                f"learning-rate schedule from {old_total} to {new_total} steps"
            )
        elif new_total != old_total:
            note = f"{what}: the run now ends at step {new_total} instead of {old_total}"
    if problems:
        raise CheckpointError(
            f"{path} was written by a run with other settings, so resuming it would not "
            f"continue that run: {'; '.join(problems)}; use the checkpoint's values, another "
            "run_name, or resume=false to start this run afresh"
        )
    return note
