"""Where a training run failed: the step an exception escaped the training loop at.

:meth:`~cmpnn_dist.training.trainer.Trainer.run` marks every exception that escapes it with
the step in progress (``s`` while step ``s`` trains, validates or checkpoints; the last step
during the final test evaluation; none before the first step), so that a distributed run's
one error line can name the rank *and* the step of a crash
(:mod:`cmpnn_dist.distributed.crash_report`).
"""

from __future__ import annotations

import contextlib

_ATTR = "cmpnn_training_step"


def mark_step(exc: BaseException, step: int | None) -> None:
    """Record ``step`` on ``exc`` unless a step is recorded already (the innermost loop's)."""
    if step is not None and step_of(exc) is None:
        with contextlib.suppress(AttributeError, TypeError):  # exceptions without a __dict__
            setattr(exc, _ATTR, int(step))


def step_of(exc: BaseException) -> int | None:
    """The step recorded by :func:`mark_step`, else None."""
    step = getattr(exc, _ATTR, None)
    return step if isinstance(step, int) else None
