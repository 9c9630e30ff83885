"""``run_scoring_pool``: score independent tasks on a pool of Ray actors, results to the driver.

Batch scoring (``python -m cmpnn_dist.predict.batch``) splits its queries into parts; each
part is one task.  ``num_workers`` actors (``cpus_per_worker`` CPUs each and torch threads to
match, or ``gpus_per_worker`` GPUs with ``use_gpu``) each build their scorer once with
``make_scorer(setup, device)`` -- a module-level function of the caller, importable by name
in a Ray worker (this module never imports the layers above it) -- and then answer
``scorer(payload)`` for the tasks sent to them.  Every actor holds up to ``inflight`` tasks
(default 1: a task goes to the first actor that is free, so the last parts do not queue
behind a busy one while another idles), and each finished result
goes to ``on_result(key, result)`` in the driver as soon as it arrives, in completion order:
the driver writes it (the single writer of the output), so a task is written at most once.

A dead actor (a killed worker process) is restarted up to ``max_failures`` times and its
tasks retried; after that the job fails with one
:class:`~cmpnn_dist.distributed.driver.DistributedTrainingError` line.  What ``on_result``
wrote stays written: running the job again continues from there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

MakeScorer = Callable[[Any, str], Callable[[Any], Any]]


class ScoringActor:
    """One Ray worker of the pool: its scorer, built once (the model loaded once)."""

    def __init__(self, make_scorer: MakeScorer, setup: Any, threads: int, use_gpu: bool) -> None:
        torch.set_num_threads(max(1, threads))
        self.device = "cuda" if use_gpu else "cpu"
        self.scorer = make_scorer(setup, self.device)

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "device": self.device, "threads": torch.get_num_threads()}

    def score(self, key: Any, payload: Any) -> tuple[Any, Any]:
        return key, self.scorer(payload)


def run_scoring_pool(
    cfg: Any,
    make_scorer: MakeScorer,
    setup: Any,
    tasks: Iterable[tuple[Any, Any]],
    on_result: Callable[[Any, Any], None],
    inflight: int = 1,
    on_ready: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Score ``tasks`` (``(key, payload)`` pairs) on ``max(1, cfg.cluster.num_workers)``
    actors; ``on_result(key, scorer(payload))`` runs in the caller for each, as they finish.

    ``setup`` goes to every actor once through Ray's object store (a checkpoint's state read
    by the driver).  ``on_ready(workers)`` runs once every actor has built its scorer (so the
    caller can time the scoring alone).  Ray is started here (``cluster.address`` /
    ``RAY_ADDRESS`` or a local Ray) unless already initialized, and stopped when this call
    started it.  Returns what each actor reported (pid, device, threads)."""
    import ray

    from .driver import DistributedTrainingError, _first_lines, _init_ray, _worker_env

    cl = cfg.cluster
    workers = max(1, int(cl.num_workers))
    pending_tasks = list(tasks)
    started = _init_ray(cfg)
    try:
        options: dict[str, Any] = {
            "num_cpus": float(cl.cpus_per_worker),
            "max_restarts": int(cl.max_failures),
            "max_task_retries": int(cl.max_failures),
            "runtime_env": {"env_vars": _worker_env()},
        }
        if cl.use_gpu:
            options["num_gpus"] = float(cl.gpus_per_worker)
        actor_cls = ray.remote(ScoringActor).options(**options)
        threads = max(1, int(cl.cpus_per_worker))
        ref = ray.put(setup)
        actors = [actor_cls.remote(make_scorer, ref, threads, bool(cl.use_gpu))
                  for _ in range(workers)]  # fmt: skip
        try:
            info = ray.get([a.ready.remote() for a in actors])
            if on_ready is not None:
                on_ready(info)
            running: dict[Any, Any] = {}  # object ref -> actor
            queue = iter(pending_tasks)

            def submit(actor: Any) -> bool:
                task = next(queue, None)
                if task is None:
                    return False
                running[actor.score.remote(*task)] = actor
                return True

            for _ in range(max(1, inflight)):  # round-robin: every actor busy first
                for actor in actors:
                    submit(actor)
            while running:
                done, _ = ray.wait(list(running), num_returns=1)
                actor = running.pop(done[0])
                key, result = ray.get(done[0])
                submit(actor)  # the actor scores its next task while the caller writes this one
                on_result(key, result)
        except ray.exceptions.RayError as exc:
            raise DistributedTrainingError(
                f"batch scoring failed on a Ray worker (cluster.max_failures={cl.max_failures}): "
                f"{_first_lines(str(exc), 1)}; the parts written so far are kept, run the same "
                "command again to continue"
            ) from exc
        finally:
            for actor in actors:
                ray.kill(actor)
        return info
    finally:
        if started:
            ray.shutdown()
