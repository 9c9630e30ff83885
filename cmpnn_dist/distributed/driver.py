"""``run_distributed(cfg, dataset_path)``: train with Ray Train's ``TorchTrainer`` (DDP workers).

Ray Train V2 is the default in the installed Ray (``RAY_TRAIN_V2_ENABLED`` unset means on);
this module uses only APIs that V2 supports (``ray.train.report(checkpoint_dir_name=...)``,
``FailureConfig(max_failures)``, ``CheckpointConfig(num_to_keep)``).

Where things live: the run folder ``<storage_root>/runs/<run_name>`` (also Ray's
``RunConfig(storage_path=<storage_root>/runs, name=run_name)``) holds ``checkpoints/step_<s>``
and ``checkpoints/best`` (written by rank 0 through ``CheckpointStore``, exactly as in-process),
``metrics.csv``, TensorBoard events and ``results.json``.  ``storage_root`` is absolute by now
(resolved by the CLI, see ``runs/folder.py``) and may be a shared filesystem or a
pyarrow URI (``s3://...``); on several nodes it must be visible from all of them.

Resume:

* (a) a worker dies (SIGKILL, OOM, node loss): Ray tears the worker group down and starts a
  new one, up to ``cluster.max_failures`` times; ``fit`` in the new workers calls
  ``ctx.latest_checkpoint()``, which resumes from the newest valid checkpoint in the run folder;
* (b) the job dies and is submitted again with the same ``run_name``: the same lookup finds the
  checkpoints in the run folder (pruning works from the folder listing, so it goes on with
  the old ones);
* (c) a new ``run_name`` finds an empty folder and starts fresh; ``resume=false`` with an
  existing run folder renames that folder to ``<run_name>.replaced-<time>`` (nothing is
  deleted) and starts fresh.

The resumed step is announced once by rank 0 ("resuming from step N: <checkpoint>") and
returned as ``resumed_from_step``.

Ctrl-C / SIGTERM (see ``stop.py``): the workers finish the current step, checkpoint it and
stop; ``run_distributed`` raises :class:`~cmpnn_dist.training.interrupt.TrainingInterrupted`
(the CLI's one line with the resume command, exit status 130 / 143), as in-process.  A second
Ctrl-C stops at once; workers that do not stop within ``cluster.collective_timeout_s`` are
stopped (:class:`~cmpnn_dist.distributed.stop.WorkersDidNotStop`).

Errors that cannot succeed (see ``worker.py``) end the run after one attempt with
:class:`FatalTrainingError`; a start that fails and leaves no checkpoint (nor crash log)
removes the run folder it created.

Failures that must not hang: a rank stalled in a collective makes the others fail after
``cluster.collective_timeout_s`` (gloo / nccl process-group timeout, also used for Ray Train's
own report barrier via ``RAY_TRAIN_COLLECTIVE_TIMEOUT_S``); when every one of the
``max_failures + 1`` attempts fails, :class:`DistributedTrainingError` says so in one line
naming the rank, the step and the cause, with every rank's traceback in ``<run>/train.log``
(see ``crash_report.py``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
from pathlib import Path
from typing import Any

from cmpnn_dist.errors import UsageError
from cmpnn_dist.openmp_env import openmp_env
from cmpnn_dist.runs import folder as rf
from cmpnn_dist.runs.checkpoint_store import ENV_SCRATCH, CheckpointStore
from cmpnn_dist.storage import fs
from cmpnn_dist.training.interrupt import TrainingInterrupted

from . import crash_report, faults, remote
from .local_ray import init_local_ray, is_wildcard, ray_host, torch_config, worker_env
from .ray_logs import RAY_LOG_FILE, route_worker_logs
from .stop import WorkersDidNotStop, fit_until_stopped
from .timing import ENV_TIMING
from .worker import RESULT_FILE, Outcome, train_worker

logger = logging.getLogger(__name__)


class DistributedTrainingError(UsageError, RuntimeError):
    """Distributed training failed for good (bad settings or retry budget exhausted)."""


class FatalTrainingError(DistributedTrainingError):
    """A worker hit an error that a retry cannot fix (reported once, never retried)."""


def backend_for(cfg: Any) -> str:
    backend = cfg.cluster.backend
    if backend == "auto":
        return "nccl" if cfg.cluster.use_gpu else "gloo"
    if backend == "nccl" and not cfg.cluster.use_gpu:
        raise DistributedTrainingError("cluster.backend=nccl needs cluster.use_gpu=true")
    return backend


def check_settings(cfg: Any) -> None:
    n = cfg.cluster.num_workers
    if n < 1:
        raise DistributedTrainingError(f"cluster.num_workers must be >= 1, got {n}")
    if cfg.train.batch_size % n:
        raise DistributedTrainingError(
            f"train.batch_size={cfg.train.batch_size} (the global batch) must be divisible by "
            f"cluster.num_workers={n}"
        )
    if cfg.cluster.collective_timeout_s <= 0:
        raise DistributedTrainingError("cluster.collective_timeout_s must be > 0")
    if cfg.cluster.max_failures < -1:
        raise DistributedTrainingError("cluster.max_failures must be >= -1 (-1: unlimited)")


def _init_ray(cfg: Any) -> bool:
    """Connect to ``cluster.address`` / ``RAY_ADDRESS``, else start a local Ray; True when this
    call initialized Ray (the caller shuts it down), False when it was initialized already.

    A cluster that does not answer, or a local start that fails (a start-up timeout on a busy
    machine, a full /tmp...), is one :class:`DistributedTrainingError` with a hint."""
    import ray

    from .ray_logs import quiet_ray_start

    if ray.is_initialized():
        return False
    quiet_ray_start()
    address = cfg.cluster.address or os.environ.get("RAY_ADDRESS")
    if address:
        source = "cluster.address" if cfg.cluster.address else "RAY_ADDRESS"
        _check_reachable(address, source)
        try:
            ray.init(address=address, log_to_driver=True)
        except Exception as exc:  # noqa: BLE001 - one line, whatever Ray raised
            ray.shutdown()
            raise DistributedTrainingError(
                f"could not connect to the Ray cluster at {source}={address} "
                f"({type(exc).__name__}: {_first_lines(str(exc), 1) or exc!r})"
            ) from None
        return True
    if cfg.cluster.host and is_wildcard(cfg.cluster.host):
        raise DistributedTrainingError(
            f"cluster.host={cfg.cluster.host}: the local Ray needs one address of this machine "
            "(127.0.0.1, or the one other nodes reach it at), not every interface's; "
            "cluster.host=null lets Ray choose"
        )
    need = cfg.cluster.num_workers * cfg.cluster.cpus_per_worker
    num_cpus = max(os.cpu_count() or 1, math.ceil(need))
    # address="local": a new Ray here, never a cluster someone else started on this machine
    # (a bare ray.init() would join the one named in /tmp/ray/ray_current_cluster)
    attempts = 3  # Ray gives its raylet a fixed 30 s to register: a loaded machine can miss it
    for attempt in range(1, attempts + 1):
        try:
            init_local_ray(cfg.cluster.host, num_cpus=num_cpus, log_to_driver=True)
            break
        except Exception as exc:  # a start-up timeout, a full /tmp...: one line and a hint
            ray.shutdown()
            if attempt < attempts and "timed out" in str(exc).lower():
                continue  # again, silently: the run's first line is still its own
            tries = f"; {attempt} attempts" if attempt > 1 else ""
            raise DistributedTrainingError(
                f"could not start a local Ray cluster ({type(exc).__name__}: "
                f"{_first_lines(str(exc), 1) or exc!r}{tries}); a busy or small "
                "machine may need RAY_gcs_server_port_wait_time_s=120 or a cluster started first "
                "(ray start --head, then cluster.address=auto), a full /tmp a RAY_TMPDIR elsewhere"
            ) from None
    _start_reaper()
    return True


def _check_reachable(address: str, source: str, timeout_s: float = 10.0) -> None:
    """A ``host:port`` / ``ray://host:port`` address must accept a TCP connection: Ray itself
    retries a silent address for many minutes.  Other forms (``auto``...) are left to Ray."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in hostport:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise DistributedTrainingError(
            f"{source}={address}: no Ray cluster answers at {host}:{port} "
            f"({exc.strerror or type(exc).__name__}); start one (ray start --head) or unset "
            f"{source} to start a local Ray"
        ) from None


def _start_reaper() -> None:
    """Watch the Ray processes this driver started: they are stopped if it dies unannounced
    (SIGKILL) without ``ray.shutdown()`` (see :mod:`.reaper`)."""
    try:
        import ray

        from .reaper import start_reaper

        session = ray._private.worker._global_node.get_session_dir_path()
        start_reaper(session)
    except Exception as exc:  # noqa: BLE001 - the watcher is a safety net, never fatal
        logger.warning("not watching the Ray processes for cleanup: %s", exc)


def _worker_env() -> dict[str, str]:
    """The environment of this driver's Ray workers (call it once Ray is initialized)."""
    env = faults.propagated_env()
    env.update(worker_env(ray_host()))  # gloo / nccl on the loopback interface of a local Ray
    env.update(openmp_env())  # passive OpenMP waits, before the worker imports torch
    for key in (ENV_TIMING, "CMPNN_CACHE_DIR", ENV_SCRATCH):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _read_or_none(uri: str) -> str | None:
    """The text of file ``uri``; None when it is absent."""
    try:
        return remote.read_text(uri) if remote.exists(uri) else None
    except FileNotFoundError:
        return None


def _first_lines(text: str, n: int = 12) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    tail = lines[-n:]
    return "\n".join(tail)


def _crash_records(outcome: Any) -> list[dict[str, Any]]:
    """The crash records the workers left in the ``Outcome`` actor (none if it is gone)."""
    import ray

    try:
        return list(ray.get(outcome.crashes.remote(), timeout=60))
    except Exception as exc:  # noqa: BLE001 - the run's own error is what gets reported
        logger.warning("could not read the workers' crash records: %s", exc)
        return []


def _write_crash_log(run: str, records: list[dict[str, Any]], error: Any) -> str | None:
    """:func:`crash_report.write_log`, or None when the run folder cannot take it (a full
    disk...): the one line then says where else to look."""
    try:
        return crash_report.write_log(run, records, error)
    except Exception as exc:  # noqa: BLE001 - the run's own error is what gets reported
        logger.warning("could not write the crash log in %s: %s", run, exc)
        return None


def run_distributed(
    cfg: Any, dataset_path: str | Path, claim: rf.Claim | None = None
) -> dict[str, Any]:
    """Train ``cfg`` on ``cluster.num_workers`` Ray Train workers; returns the CLI summary.

    Args:
        cfg: the resolved :class:`~cmpnn_dist.config.Config`.
        dataset_path: the Arrow dataset folder: a local / shared path or a pyarrow URI.
        claim: the run folder, already locked by the caller after the checks of a start
            (:func:`~cmpnn_dist.runs.start.prepare`: the CLI runs them before its first
            lines); None makes those checks and locks it here.  Released when the run ends.

    Returns:
        ``{"run_dir", "valid", "test", "resumed_from_step", "resumed_from", "step",
        "best_step", "world_size", "checkpoint", "timing", ...}``.

    Raises:
        DistributedTrainingError: bad cluster settings, or every attempt failed.
    """
    import ray
    from ray.train import FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    cl = cfg.cluster
    if claim is None:  # called directly, not after runs.prepare (which did these checks)
        check_settings(cfg)
        cfg.run_name = rf.default_run_name(cfg)
        cfg.storage_root = rf.resolve_storage_root(cfg.storage_root)  # workers get it absolute
        rf.check_storage_root(cfg.storage_root)
    runs = remote.runs_root(cfg.storage_root)
    run_uri = remote.join(runs, cfg.run_name)
    backend = backend_for(cfg)
    if claim is None:  # the driver owns the run folder while it runs
        claim = rf.claim_run(run_uri, cfg.resume)
    result_uri = remote.join(run_uri, RESULT_FILE)
    # a finished run's results.json stays until rank 0 replaces it whole (written to a
    # temporary name, renamed): a re-run killed at any moment leaves it as it was
    results_before = _read_or_none(result_uri)
    dataset = str(dataset_path)
    if not remote.is_uri(dataset):
        dataset = str(Path(dataset).resolve())
    timeout_s = max(1, math.ceil(cl.collective_timeout_s))
    # Ray Train's own barriers (ray.train.report) get the same bound as torch's collectives
    os.environ["RAY_TRAIN_COLLECTIVE_TIMEOUT_S"] = str(timeout_s)

    resources = {"CPU": float(cl.cpus_per_worker)}
    if cl.use_gpu:
        resources["GPU"] = float(cl.gpus_per_worker)
    started, failed, kept_log = False, True, False
    unroute = lambda: None  # noqa: E731 - replaced once Ray's printer is routed
    try:
        started = _init_ray(cfg)
        # our workers' lines on the console, Ray's own in the run's ray.log (ray_logs)
        local_run = fs.local_path(run_uri)
        unroute = route_worker_logs(str(local_run / RAY_LOG_FILE) if local_run else None)
        # on the driver's node, like Ray Train's controller: it outlives the loss of a worker node
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        outcome = Outcome.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)
        ).remote()
        trainer = TorchTrainer(
            train_worker,
            train_loop_config={
                "cfg": cfg,
                "run_uri": run_uri,
                "dataset": dataset,
                "outcome": outcome,
                "owner": claim.lock.owner or None,
            },
            torch_config=torch_config(backend, timeout_s, ray_host()),
            scaling_config=ScalingConfig(
                num_workers=cl.num_workers, use_gpu=cl.use_gpu, resources_per_worker=resources
            ),
            run_config=RunConfig(
                name=cfg.run_name,
                storage_path=runs,
                failure_config=FailureConfig(max_failures=cl.max_failures),
                worker_runtime_env={"env_vars": _worker_env()},
                # tracebacks go to the run's log; the console gets one line (crash_report)
                logging_config=LoggingConfig(log_level=crash_report.RAY_TRAIN_LOG_LEVEL),
            ),
        )
        try:
            _, signum = fit_until_stopped(
                trainer.fit,
                lambda sig: ray.get(outcome.request_stop.remote(sig)),
                grace_s=cl.collective_timeout_s,
            )
        except WorkersDidNotStop as stuck:
            newest = CheckpointStore(run_uri).candidates()
            if newest:
                stuck.step, stuck.checkpoint = newest[0]
            raise
        except ray.train.TrainingFailedError as e:
            records = _crash_records(outcome)
            log = _write_crash_log(run_uri, records, e)
            kept_log = log is not None
            attempts = "every" if cl.max_failures < 0 else str(cl.max_failures + 1)
            where = f"traceback in {log}" if log else "see the Ray workers' logs"
            raise DistributedTrainingError(
                f"distributed training of run {cfg.run_name!r} failed on {attempts} attempt(s) "
                f"(cluster.max_failures={cl.max_failures}): {crash_report.summary(records, e)}; "
                f"{where}; submitting again with run_name={cfg.run_name} resumes from the last "
                "valid checkpoint"
            ) from None
        error = ray.get(outcome.get.remote())
        if error is not None:
            raise FatalTrainingError(f"{error} (run {cfg.run_name!r}, not retried)")
        stopped = ray.get(outcome.interruption.remote()) if signum is not None else None
        if stopped is not None:  # checkpointed at the step where every rank stopped
            failed = False
            raise TrainingInterrupted(*stopped)
        text = _read_or_none(result_uri)
        if text is None or text == results_before:
            raise DistributedTrainingError(
                f"training finished but rank 0 left no new {result_uri} (see the worker logs)"
            )
        summary = json.loads(text)
        newest = CheckpointStore(run_uri).candidates()
        summary["checkpoint"] = newest[0][1] if newest else None
        records = _crash_records(outcome)
        if records:  # attempts that failed before a retry succeeded: their tracebacks
            summary["log"] = _write_crash_log(run_uri, records, None)
        failed = False
        return summary
    finally:
        if failed and not kept_log:  # a start that left no checkpoint (nor log) leaves no folder
            claim.abandon()
        claim.release()
        try:  # Ray's processes print until it is down (the placement-group cleaner's warnings)
            if started:
                ray.shutdown()
        finally:
            unroute()
