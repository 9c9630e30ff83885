"""The training state machine behind :func:`cmpnn_dist.training.loop.fit`.

:class:`Trainer` owns the model, the Adam optimizer, the :class:`QuerySampler`, the history
and the best weights of one run; its ``run()`` is the step / validation / checkpoint loop
described in :mod:`cmpnn_dist.training.loop`, and ``state()`` / ``restore()`` define what a
checkpoint holds (version ``CHECKPOINT_VERSION``).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cmpnn_dist.config import config_to_dict
from cmpnn_dist.runs.checkpoint import load_checkpoint, save_checkpoint
from cmpnn_dist.runs.restore import check_resumable
from cmpnn_dist.runs.resume_keys import check_resume

from .builders import autocast, build_loss, build_lr_scheduler, build_optimizer
from .context import TrainContext
from .data import TrainData
from .failure import mark_step
from .interrupt import TrainingInterrupted
from .rng import capture_rng_state, restore_rng_state
from .sampler import QuerySampler
from .validation import check_eval_options, evaluate_split

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1


@dataclass
class FitResult:
    """What :func:`fit` returns; ``model`` holds the best weights, ``final_state`` the last."""

    run_dir: Path | str | None  # a local Path, or the URI of a run folder behind one
    best_valid: dict[str, float]
    test: dict[str, float]
    history: list[dict[str, Any]]
    resumed_from_step: int | None
    model: nn.Module
    final_state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_step: int | None = None
    step: int = 0


def _state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


class Trainer:
    """State of one :func:`~cmpnn_dist.training.loop.fit` call: model, optimizer, sampler,
    history and best weights; ``run()`` is the step / epoch loop, ``state()`` / ``restore()``
    the checkpoint content."""

    def __init__(
        self, cfg: Any, data: TrainData, ctx: TrainContext, on_step: Any, governor: Any = None
    ) -> None:
        """``governor``: the CPU run's :class:`~.threads.ThreadGovernor` (its record goes into
        every checkpoint; a resume hands it the checkpoint's), or None."""
        from cmpnn_dist.model.build import build_model

        self.cfg, self.data, self.ctx, self.on_step = cfg, data, ctx, on_step
        self.governor = governor
        tc = cfg.train
        check_eval_options(cfg, data)
        self.device = torch.device(ctx.device)
        self.model = build_model(
            cfg.model, cfg.ops, data.num_relations, data.num_nodes, data.inductive
        ).to(self.device)
        self.optimizer = build_optimizer(cfg, self.model)
        self.loss_fn = build_loss(cfg)
        try:
            self.sampler = self._sampler(data, ctx)
        except ValueError as exc:  # too few facts for a batch...: the config, one line
            from cmpnn_dist.config import ConfigError

            raise ConfigError(str(exc)) from None
        self.total_steps = self.sampler.steps_per_epoch * tc.epochs
        if tc.max_steps is not None:
            self.total_steps = min(self.total_steps, tc.max_steps)
        self.scheduler = build_lr_scheduler(cfg, self.optimizer, self.total_steps)
        self._init_state()

    def _sampler(self, data: TrainData, ctx: TrainContext) -> QuerySampler:
        tc = self.cfg.train
        return QuerySampler(
            data.train.queries,
            data.num_nodes,
            data.num_relations,
            tc.batch_size,
            tc.num_negatives,
            tc.seed,
            rank=ctx.rank,
            world_size=ctx.world_size,
            filter_triples=data.train.filter_triples,
            node_types=data.train.node_types,
            negatives=str(getattr(tc.negatives, "value", tc.negatives)),
        )

    def _init_state(self) -> None:
        cfg = self.cfg
        self._graphs: dict[int, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_valid: dict[str, float] = {}
        self.best_step: int | None = None
        self.step = 0
        self.at_step: int | None = None  # the step in progress (None before the first)
        self.last_valid_step = -1
        self.last_valid_mrr: float | None = None
        self.resumed_from: int | None = None
        self.config_dict = config_to_dict(cfg)
        # checkpoint.every_minutes: the clock restarts at each checkpoint; the decision rides on
        # the loss all-reduce (any rank past the interval -> all ranks checkpoint together)
        self._minutes = cfg.checkpoint.every_minutes
        self._last_save = time.monotonic()
        self._time_due = False
        self._said_no_valid = False
        # train.max_minutes: seconds of training before this process (from the checkpoint),
        # the clock of this process's loop, and whether the budget is spent (agreed by all ranks)
        max_minutes = cfg.train.max_minutes
        self._budget_s = 60.0 * max_minutes if max_minutes else None
        self._trained_s = 0.0
        self._clock0 = time.monotonic()
        self._time_up = False

    def graph(self, g: Any) -> Any:
        """``g`` on the training device, cached (keeps Graph's lookup caches alive)."""
        if id(g) not in self._graphs:
            self._graphs[id(g)] = g if g.device == self.device else g.to(self.device)
        return self._graphs[id(g)]

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "step": self.step,
            "epoch": self.sampler.epoch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "sampler": self.sampler.state_dict(),
            "rng": capture_rng_state(),
            "config": self.config_dict,
            "data": {
                "num_nodes": self.data.num_nodes,
                "num_relations": self.data.num_relations,
                "num_train_facts": len(self.data.train.queries),
            },
            "history": self.history,
            "best": {"state": self.best_state, "valid": self.best_valid, "step": self.best_step},
            "last_valid_step": self.last_valid_step,
            "last_valid_mrr": self.last_valid_mrr,
            "train_seconds": self.train_seconds(),
            "reproducibility": self.governor.record() if self.governor is not None else None,
        }

    def train_seconds(self) -> float:
        """Wall seconds this run has trained (its validations included), over every resume."""
        return self._trained_s + time.monotonic() - self._clock0

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (main rank only; others get None)."""
        self._last_save = time.monotonic()
        if not self.ctx.is_main:
            return None
        meta: dict[str, Any] = {}
        if self.last_valid_step == self.step and self.last_valid_mrr is not None:
            meta["score"] = self.last_valid_mrr  # valid MRR of this checkpoint's weights
        elif self.last_valid_step == self.step:
            meta["best_is_last"] = True  # validated but nothing ranked: best = the last weights
        return save_checkpoint(self.ctx.checkpoint_path(self.step), self.state(), meta)

    def restore(self, path: Path) -> None:
        state = load_checkpoint(path)
        note = check_resume(
            path,
            state.get("config", {}),
            self.config_dict,
            int(state["step"]),
            self.sampler.steps_per_epoch,
        )
        if note and self.ctx.is_main:
            _say(note)
        mine = {
            "num_nodes": self.data.num_nodes,
            "num_relations": self.data.num_relations,
            "num_train_facts": len(self.data.train.queries),
        }
        check_resumable(path, state, self.config_dict.get("model"), mine)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scheduler") is not None:  # checkpoints without a schedule state: None
            self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        self.history = list(state["history"])
        best = state["best"]
        self.best_state, self.best_valid, self.best_step = (
            best["state"],
            best["valid"],
            best["step"],
        )
        self.step = int(state["step"])
        self.last_valid_step = int(state["last_valid_step"])
        self.last_valid_mrr = state["last_valid_mrr"]
        self._trained_s = float(state.get("train_seconds", 0.0))
        self._clock0 = time.monotonic()
        if self._budget_s is not None and self._trained_s >= self._budget_s:
            self.total_steps = min(self.total_steps, self.step)  # train.max_minutes is spent
        restore_rng_state(state["rng"])
        if self.governor is not None:
            self.governor.resume(state.get("reproducibility"))
        self.resumed_from = self.step
        logger.debug("resumed from step %d (%s)", self.step, path)  # the context announces it
        self.ctx.on_resume(self.history, self.step)

    # ------------------------------------------------------------------ steps
    def train_step(self, train_model: nn.Module) -> float:
        batch = self.sampler.next_batch()
        assert batch is not None
        graph = self.graph(self.data.train.graph)
        q = batch.queries.to(self.device)
        neg = batch.negatives.to(self.device)
        mask = graph.query_edge_mask(
            batch.global_queries.to(self.device),
            self.cfg.train.remove_query_edges,
            negatives=batch.global_negatives.to(self.device),
        )
        with autocast(self.cfg, self.device):
            logits = train_model(graph, q[:, 0], q[:, 1], mask)  # [b, N]
        logits = logits.float()
        loss = self.loss_fn(logits.gather(1, q[:, 2:3]).squeeze(1), logits.gather(1, neg))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        if not self._minutes and self._budget_s is None:
            return float(self.ctx.all_reduce_mean(loss.detach()).item())
        # the clocks' decisions ride on the loss all-reduce: any rank past -> every rank acts
        due = bool(self._minutes) and time.monotonic() - self._last_save >= 60.0 * self._minutes
        up = self._budget_s is not None and self.train_seconds() >= self._budget_s
        flags = loss.detach().new_tensor([0.0, float(due), float(up)])
        flags[0] = loss.detach()
        loss_mean, due_mean, up_mean = self.ctx.all_reduce_mean(flags).tolist()
        self._time_due, self._time_up = due_mean > 0, up_mean > 0
        return float(loss_mean)

    def validate(self, epoch: int) -> dict[str, Any]:
        """Validation row; updates the best weights (highest valid MRR, earliest on ties).
        Without ``valid`` in ``eval.splits`` nothing is ranked and the last weights count as
        the best."""
        valid = self.data.valid
        if len(valid.queries) and "valid" in self.cfg.eval.splits:
            metrics = evaluate_split(
                self.model,
                valid,
                self.graph(valid.graph),
                self.cfg,
                self.data.num_relations,
                ctx=self.ctx,
            )
        else:
            metrics = {}
        self.last_valid_step = self.step
        mrr = metrics.get("mrr", float("-inf"))
        self.last_valid_mrr = metrics.get("mrr")
        if not metrics:  # nothing ranked: finish() keeps the last weights
            self.best_state, self.best_valid, self.best_step = None, {}, self.step
            if self.ctx.is_main and not self._said_no_valid:
                self._said_no_valid = True
                why = "eval.splits has no valid" if len(valid.queries) else "no valid facts"
                _say(f"no validation ({why}): checkpoints/best holds the last weights")
        elif self.best_step is None or mrr > self.best_valid.get("mrr", float("-inf")):
            self.best_state = _state_copy(self.model)
            self.best_valid, self.best_step = dict(metrics), self.step
        row: dict[str, Any] = {"kind": "valid", "step": self.step, "epoch": epoch}
        row.update({f"valid_{k}": v for k, v in metrics.items()})
        if metrics and self.ctx.is_main:
            best = " (best)" if self.best_step == self.step else ""
            _say(
                f"epoch {epoch} step {self.step}: valid mrr {metrics['mrr']:.4f} "
                f"hits@1 {metrics['hits@1']:.4f} hits@10 {metrics['hits@10']:.4f}{best}"
            )
        return row

    def log(self, row: dict[str, Any], checkpoint: Path | None) -> None:
        self.history.append(row)
        self.ctx.report(row, checkpoint)

    def describe(self) -> str:
        """One line on what is trained: the data's size, the model's shape and parameters."""
        d, m = self.data, self.cfg.model
        params = sum(p.numel() for p in self.model.parameters())
        kind = "inductive" if d.inductive else "transductive"
        return (
            f"data: {d.num_nodes:,} entities, {d.num_relations} relations, "
            f"{len(d.train.queries):,} training facts ({kind}) | model: {m.family} "
            f"{m.num_layers} x {m.hidden_dim}, {params:,} parameters | "
            f"{self.total_steps:,} steps of {self.cfg.train.batch_size} queries on {self.device}"
        )

    def run(self) -> FitResult:
        """Train to the end (resuming first when the context offers a checkpoint) and test.
        An exception escaping it carries the step in progress
        (:func:`~cmpnn_dist.training.failure.step_of`)."""
        try:
            return self._run()
        except Exception as exc:
            mark_step(exc, self.at_step)
            raise

    def _run(self) -> FitResult:
        cfg, tc, ctx = self.cfg, self.cfg.train, self.ctx
        if ctx.is_main:
            _say(self.describe())
        ckpt = ctx.latest_checkpoint()
        if ckpt is not None:
            self.restore(ckpt)
        train_model = ctx.wrap_model(self.model)
        if self.step >= self.total_steps and self.last_valid_step != self.step:
            # resumed at the last step from a checkpoint written before its validation (a
            # mid-epoch one, or the run's length changed): validate and publish it now, so the
            # run ends with validation and ``best`` as an uninterrupted one does
            vrow = self.validate(self.sampler.epoch)
            self.history.append(vrow)
            ctx.report(vrow, self.save())
        train_model.train()
        total, start = self.total_steps, self.step
        every = cfg.checkpoint.every_steps
        bar = _progress(tc.progress and ctx.is_main, total, self.step)
        recent: list[float] = []
        stops = ctx.stop_requests()  # while active, a SIGINT / SIGTERM asks the loop to stop
        stops.__enter__()
        try:
            while self.step < total:
                self.at_step = self.step + 1
                epoch = self.sampler.epoch
                lr = self.optimizer.param_groups[0]["lr"]  # the rate this step's update uses
                loss = self.train_step(train_model)
                self.step += 1
                if self._time_up and self.step < total:  # train.max_minutes: this step is last
                    total = self.total_steps = self.step
                    if ctx.is_main:
                        _say(f"train.max_minutes={tc.max_minutes} spent at step {self.step}")
                recent.append(loss)
                epoch_end = self.sampler.exhausted
                if epoch_end:
                    self.sampler.set_epoch(epoch + 1)
                row = {"kind": "train", "step": self.step, "epoch": epoch, "loss": loss, "lr": lr}
                row["epochs_done"] = round(self.step / self.sampler.steps_per_epoch, 4)
                row["time_s"] = round(self.train_seconds(), 3)  # summed over resumes
                ckpt = None
                signum = ctx.stop_signal()  # the same answer on every rank
                stopping = signum is not None
                due = bool(every and self.step % every == 0) or self._time_due or stopping
                if due and not epoch_end and self.step < total:
                    self.history.append(row)
                    ckpt = self.save()
                    ctx.report(row, ckpt)
                else:
                    self.log(row, None)
                if epoch_end or self.step == total:
                    vrow = self.validate(epoch)
                    self.history.append(vrow)
                    ckpt = self.save()  # holds vrow in its history
                    ctx.report(vrow, ckpt)
                if stopping and self.step < total:  # this step's checkpoint is published
                    raise TrainingInterrupted(signum, self.step, _published(ctx, ckpt))
                bar.update(1)
                if self.step % max(tc.log_every, 1) == 0 or epoch_end:
                    mean = sum(recent) / len(recent)
                    bar.set_postfix(loss=f"{mean:.4f}")
                    logger.info("step %d epoch %d loss %.4f", self.step, epoch, mean)
                    recent = []
                if self.on_step is not None:
                    self.on_step(self.step)
        finally:
            bar.close()
            stops.__exit__(None, None, None)
        if ctx.is_main and (note := self._budget_note(start)) is not None:
            _say(note)
        return self.finish()

    def _budget_note(self, start: int) -> str | None:
        """The line saying that the step budget ended training while ``train.max_minutes``
        had time left (None when the time budget ended it, is unset, or nothing was trained
        here), so that a time budget is never capped without a word."""
        tc = self.cfg.train
        if self._budget_s is None or self._time_up or self.step <= start:
            return None
        spent = self.train_seconds() / 60.0
        if spent >= tc.max_minutes:
            return None
        if tc.max_steps is not None and self.total_steps == tc.max_steps:
            cap, lift = f"train.max_steps={tc.max_steps}", "train.max_steps=null lifts it"
        else:
            cap, lift = f"train.epochs={tc.epochs}", "a larger train.epochs lifts it"
        return (
            f"{cap} ended training at step {self.step} after {spent:.1f} of "
            f"train.max_minutes={tc.max_minutes} minutes ({lift})"
        )

    def finish(self) -> FitResult:
        final_state = _state_copy(self.model)
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        test: dict[str, float] = {}
        if "test" in self.cfg.eval.splits and len(self.data.test.queries):
            split = self.data.test
            test = evaluate_split(
                self.model,
                split,
                self.graph(split.graph),
                self.cfg,
                self.data.num_relations,
                ctx=self.ctx,
                ranks_dir=_ranks_dir(self.ctx),
                split_name="test",
            )
            row = {"kind": "test", "step": self.step, "epoch": self.sampler.epoch}
            row.update({f"test_{k}": v for k, v in test.items()})
            self.log(row, None)
        return FitResult(
            run_dir=_public_run_dir(self.ctx),
            best_valid=dict(self.best_valid),
            test=test,
            history=self.history,
            resumed_from_step=self.resumed_from,
            model=self.model,
            final_state=final_state,
            best_step=self.best_step,
            step=self.step,
        )


def _say(line: str) -> None:
    """A line for the person watching, printed above the progress bar (stderr)."""
    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


def _published(ctx: TrainContext, ckpt: Path | None) -> str | None:
    """Where checkpoint ``ckpt`` (written at a local path) was published."""
    if ckpt is None:
        return None
    uri = getattr(ctx, "run_uri", None)
    if uri is not None and "://" in str(uri):
        return f"{uri}/checkpoints/{Path(ckpt).name}"
    return str(ckpt)


def _public_run_dir(ctx: TrainContext) -> Any:
    """The run folder as the user named it: a local Path, or the URI (a string)."""
    uri = getattr(ctx, "run_uri", None)
    local = getattr(ctx, "run_dir", None)
    if uri is not None and "://" in str(uri):
        return str(uri)
    return Path(local) if local is not None else None


def _ranks_dir(ctx: TrainContext) -> Path | None:
    """The run folder (per-query ranks go there) on the main rank, when it is local."""
    run_dir = getattr(ctx, "run_dir", None)
    return Path(run_dir) if ctx.is_main and run_dir else None


def _progress(enabled: bool, total: int, initial: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, desc="train", dynamic_ncols=True)
