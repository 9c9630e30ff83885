"""Chaos run: a Ray training with 2 workers survives random SIGKILLs and ends as a straight run.

1. A straight run: ``python -m cmpnn_dist.train cluster.num_workers=2 train.deterministic=true
   train.max_steps=S checkpoint.every_steps=E ...`` on the built-in rule-planted graph, alone.
2. The chaos run: the same command (another storage root) under a *supervisor* that runs it
   again whenever it exits non-zero, as a preemptible cluster's job retry would.  Beside it:

   * a chaos thread that, every ``--interval`` seconds (times a uniform factor in
     [1 - jitter, 1 + jitter], from a seeded RNG, printed), picks a victim class at random --
     the driver (the ``cmpnn_dist.train`` process), a Ray Train worker
     (``ray::RayTrainWorker``), or a Ray system process of the run's own local cluster (GCS
     server, raylet, dashboard / runtime-env agents, log and autoscaler monitors, Ray Train's
     controller and the run's other actors) -- then one process of that class at random, and
     SIGKILLs it.  Victims are looked up among the *descendants of the current driver* only
     (other Ray clusters on the machine are never touched).  A fault waits until the newest
     checkpoint has moved past the one of the previous fault and past the one the current
     attempt resumed from, so the run always progresses;
   * reader threads that loop ``python -m cmpnn_dist.predict ckpt=<run folder> ...`` and
     ``python -m cmpnn_dist.evaluate ckpt=<run folder> eval.max_queries=...`` against the live
     run; a non-zero exit is a reader failure unless it is the documented "nothing to read
     yet" line (``error: checkpoint path ... does not exist`` / ``no valid checkpoint at``)
     while no complete checkpoint existed.
3. The comparison: ``results.json`` (valid and test metrics), every ``metrics.csv`` row (the
   wall-clock ``time_s`` column aside: bit-identical losses, learning rates, validation and
   test rows), the checkpoint names and the weights of ``best`` and of the last checkpoint
   (``torch.equal``) of the chaos run against the straight run.

    python -m benchmarks.cluster.chaos --steps 150 --every-steps 5 --interval 45 --faults 6 --seed 0

Results: ``benchmarks/results/cluster/chaos_cpu.md`` / ``.json`` (``--out``): the header (command,
machine, load, commit, date), the faults by kind, the attempts and their exit statuses, the
readers' runs and failures, the comparison.  Exit status 0 when the chaos run finished
identical to the straight run with no reader failure, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import child_command, command_line, cpu_model, git_commit
from benchmarks.harness.results import results_dir, write_atomic

ROOT = Path(__file__).resolve().parents[2]


RUN = "chaos"
# a Ray system process of the run's local cluster: (kind, pattern on the command line)
SYSTEM = [
    ("gcs_server", r"/gcs_server "),
    ("raylet", r"/raylet "),
    ("dashboard_agent", r"^ray::DashboardAgent|dashboard/agent\.py"),
    ("runtime_env_agent", r"^ray::RuntimeEnvAgent|runtime_env/agent/main\.py"),
    ("dashboard", r"dashboard/dashboard\.py"),
    ("log_monitor", r"_private/log_monitor\.py"),
    ("autoscaler_monitor", r"autoscaler/_private/monitor\.py"),
    ("train_controller", r"^ray::TrainController"),
    ("ray_actor", r"^ray::(?!RayTrainWorker|TrainController|DashboardAgent|RuntimeEnvAgent)"),
]
WORKER = r"^ray::RayTrainWorker"
NOT_YET = ("does not exist", "no valid checkpoint at")
CHILDREN: set[subprocess.Popen] = set()  # killed (by pid) if this script is stopped
STOPPING = threading.Event()


def _start(cmd: list[str], **kw) -> subprocess.Popen:  # noqa: ANN003
    if STOPPING.is_set():
        raise SystemExit(1)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), **kw)
    CHILDREN.add(proc)
    return proc


def _stop_children(signum: int, _frame: object) -> None:
    STOPPING.set()
    for proc in list(CHILDREN):
        if proc.poll() is None:
            proc.kill()  # a driver's reaper then stops its Ray processes
    sys.exit(128 + signum)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CMPNN_"))}
    # RAY_DEDUP_LOGS=0: every worker's "resuming from step" line reaches the attempt's log
    return {**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}


def train_cmd(args: argparse.Namespace, root: Path) -> list[str]:
    nice = ["nice", "-n", str(args.nice)] if args.nice else []
    return [*nice, sys.executable, "-m", "cmpnn_dist.train", f"storage_root={root}",
            f"run_name={RUN}", "cluster.num_workers=2", "train.deterministic=true",
            f"train.max_steps={args.steps}", f"checkpoint.every_steps={args.every_steps}",
            f"cluster.max_failures={args.max_failures}",
            f"cluster.collective_timeout_s={args.collective_timeout}",
            "train.progress=false", *args.set]  # fmt: skip


# --- processes ------------------------------------------------------------------------------


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if stat[0] != "Z" and cmd:
            out[int(p.name)] = (int(stat[1]), cmd.strip())
    return out


def candidates(driver: int) -> dict[str, list[tuple[int, str, str]]]:
    """The driver and its descendants by victim class: {class: [(pid, kind, command)]}."""
    procs = _procs()
    if driver not in procs:
        return {}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, list[tuple[int, str, str]]] = {"driver": [(driver, "driver", procs[driver][1])]}
    todo = list(children.get(driver, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        cmd = procs[pid][1]
        if re.search(WORKER, cmd):
            out.setdefault("train_worker", []).append((pid, "train_worker", cmd))
            continue
        for kind, pattern in SYSTEM:
            if re.search(pattern, cmd):
                if kind == "ray_actor":  # ray::Outcome, ray::IDLE...: named by its actor
                    kind = "actor " + cmd.split()[0][5:].split(".")[0]
                out.setdefault("ray_system", []).append((pid, kind, cmd))
                break
    return out


def newest_step(run: Path) -> int:
    """The newest complete checkpoint's step (-1: none)."""
    steps = [int(p.parent.name[5:]) for p in (run / "checkpoints").glob("step_*/manifest.json")]
    return max(steps, default=-1)


def last_train_step(run: Path) -> int:
    try:
        rows = (run / "metrics.csv").read_text().splitlines()
    except OSError:
        return -1
    return max((int(r.split(",")[1]) for r in rows if r.startswith("train,")), default=-1)


class Chaos:
    """Everything the chaos run records; the threads share it under one lock."""

    def __init__(self, args: argparse.Namespace, root: Path, logs: Path) -> None:
        self.args, self.root, self.logs = args, root, logs
        self.run = root / "runs" / RUN
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.driver: int | None = None
        self.log: Path | None = None  # the current attempt's log
        self.attempts: list[dict] = []
        self.faults: list[dict] = []
        self.deferred = 0
        self.reads: list[dict] = []
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def say(self, text: str) -> None:
        print(f"[{self.now():7.1f}s] {text}", flush=True)

    # the supervisor: the same command again while it exits non-zero
    def supervise(self) -> None:
        cmd = train_cmd(self.args, self.root)
        for n in range(self.args.max_attempts):
            log = self.logs / f"attempt_{n:02d}.log"
            start = self.now()
            with open(log, "w") as f:
                proc = _start(cmd, stdout=f, stderr=subprocess.STDOUT)
                with self.lock:
                    self.driver, self.log = proc.pid, log
                self.say(f"attempt {n}: driver pid {proc.pid}")
                rc = self._wait(proc, log)
                with self.lock:
                    self.driver = None
            text = log.read_text(errors="replace")
            rank0 = r"\(RayTrainWorker pid=\d+\)\S* "  # a line of rank 0, forwarded by Ray
            resumed = re.findall(rank0 + r"resuming from step (\d+)", text)
            skipped = re.findall(rank0 + r"resuming from step \d+: .*skipped (.*)", text)
            groups = len(re.findall(rank0 + r"data: ", text))  # one per worker group started
            attempt = {"attempt": n, "start_s": start, "end_s": self.now(), "exit": rc,
                       "resumes_from": [int(s) for s in resumed], "skipped": skipped,
                       "worker_groups": groups,
                       "log": log.name,
                       "hung": rc == "hung", "last_line": _last_line(text)}  # fmt: skip
            self.attempts.append(attempt)
            self.say(f"attempt {n}: exit {rc}, worker resumes from steps {attempt['resumes_from']}")
            if rc == 0:
                break
            if self.args.corrupt_once and not any(f["class"] == "checkpoint" for f in self.faults):
                self.corrupt_newest()
        self.done.set()

    def corrupt_newest(self) -> None:
        """Flip one byte in the middle of the newest complete step checkpoint's weights, between
        a killed attempt and its restart: the restart must resume from an older valid one.
        Not before there are two step checkpoints (then a later failed attempt's turn)."""
        if len(list((self.run / "checkpoints").glob("step_*/manifest.json"))) < 2:
            return
        self._wait_for_old_writer()
        step = newest_step(self.run)
        state = self.run / "checkpoints" / f"step_{step:08d}" / "state.pt"
        with open(state, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(size // 2)
            byte = fh.read(1)
            fh.seek(size // 2)
            fh.write(bytes([byte[0] ^ 0xFF]))
        self.faults.append({"t_s": self.now(), "class": "checkpoint", "kind": "corrupt_newest",
                            "pid": None, "attempt": len(self.attempts), "newest_checkpoint": step,
                            "last_logged_step": last_train_step(self.run),
                            "command": f"flip byte {size // 2} of {state.name}"})  # fmt: skip
        self.say(f"chaos: flipped byte {size // 2} of step {step}'s {state.name}")

    def _wait_for_old_writer(self, timeout_s: float = 30.0) -> None:
        """Until the failed attempt's rank 0 (``.lock.writer``) is gone: a dead driver's workers
        may publish one more checkpoint for a moment, which would bury the corrupted one."""
        try:
            pid = json.loads((self.run / ".lock.writer").read_text())["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            return
        deadline = time.monotonic() + timeout_s
        while pid in _procs() and time.monotonic() < deadline:
            time.sleep(0.2)

    def progressed(self, last_fault_step: int) -> bool:
        """The current attempt has written a checkpoint of its own, newer than the previous
        fault's: its rank 0 has started (or resumed from step N) and the newest checkpoint is
        past that (a dead driver's last checkpoints do not count)."""
        if self.log is None:
            return False
        text = self.log.read_text(errors="replace")
        rank0 = r"\(RayTrainWorker pid=\d+\)\S* "
        if not re.search(rank0 + r"data: ", text):
            return False
        resumed = re.findall(rank0 + r"resuming from step (\d+)", text)
        start = int(resumed[-1]) if resumed else -1
        return newest_step(self.run) > max(start, last_fault_step)

    def _wait(self, proc: subprocess.Popen, log: Path) -> int | str:
        """The driver's exit status, or "hung" (killed) when neither its log nor the run's
        metrics moved for ``--hang-s`` seconds."""
        seen, moved = None, time.monotonic()
        while proc.poll() is None:
            mark = (log.stat().st_size, last_train_step(self.run), newest_step(self.run))
            if mark != seen:
                seen, moved = mark, time.monotonic()
            elif time.monotonic() - moved > self.args.hang_s:
                self.say(f"driver {proc.pid}: no progress for {self.args.hang_s} s, killing it")
                proc.kill()
                proc.wait()
                return "hung"
            time.sleep(1.0)
        return proc.returncode

    # the chaos thread
    def strike(self) -> None:
        rng = random.Random(self.args.seed)
        last_fault_step = -1
        while not self.done.is_set():
            kills = [f for f in self.faults if f["class"] != "checkpoint"]
            if self.args.faults and len(kills) >= self.args.faults:
                return
            wait = self.args.interval * rng.uniform(1 - self.args.jitter, 1 + self.args.jitter)
            self.say(f"chaos: next fault in {wait:.1f} s")
            if self.done.wait(wait):
                return
            if not self.progressed(last_fault_step):  # no new checkpoint of this attempt yet
                self.deferred += 1
                while not self.done.is_set() and not self.progressed(last_fault_step):
                    time.sleep(0.5)
                if self.done.wait(rng.uniform(0, self.args.interval / 2)):
                    return
            with self.lock:
                driver = self.driver
                groups = candidates(driver) if driver else {}
                if not groups:
                    continue
                group = rng.choice(sorted(groups))
                pid, kind, cmd = rng.choice(sorted(groups[group]))
                step, logged = newest_step(self.run), last_train_step(self.run)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
            last_fault_step = step
            fault = {"t_s": self.now(), "class": group, "kind": kind, "pid": pid,
                     "attempt": len(self.attempts), "newest_checkpoint": step,
                     "last_logged_step": logged, "command": cmd[:160]}  # fmt: skip
            self.faults.append(fault)
            self.say(f"chaos: SIGKILL {kind} pid {pid} (checkpoint {step}, step {logged})")

    # the readers
    def read(self, index: int) -> None:
        rng = random.Random(self.args.seed * 1000 + index + 1)
        turn = index
        while not self.done.is_set():
            had = newest_step(self.run) >= 0
            if turn % 2 == 0:
                what = ["cmpnn_dist.predict", f"ckpt={self.run}", "head=A::203", "relation=t0",
                        "topk=3", "device=cpu"]  # fmt: skip
            else:
                what = [
                    "cmpnn_dist.evaluate",
                    f"ckpt={self.run}",
                    f"eval.max_queries={self.args.eval_queries}",
                    "train.device=cpu",
                    "cluster.num_workers=0",  # in this process: no second Ray cluster here
                ]
            turn += 1
            start = time.monotonic()
            proc = _start(["nice", "-n", "19", sys.executable, "-m", *what],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
            _, stderr = proc.communicate()
            CHILDREN.discard(proc)
            err = stderr.strip().splitlines()
            if proc.returncode == 0:
                outcome = "ok"
            elif (
                not had
                and err
                and err[-1].startswith("error:")
                and any(s in err[-1] for s in NOT_YET)
            ):
                outcome = "not_yet"
            else:
                outcome = "failed"
            read = {"reader": index, "tool": what[0].split(".")[1], "outcome": outcome,
                    "exit": proc.returncode, "seconds": round(time.monotonic() - start, 1),
                    "fallback_lines": [ln for ln in err if ln.endswith(" instead")]}  # fmt: skip
            if outcome == "failed":
                read["stderr_tail"] = "\n".join(err[-15:])
                self.say(f"reader {index}: {what[0]} FAILED (exit {proc.returncode}): {err[-1:]}")
            self.reads.append(read)
            if outcome == "not_yet":
                self.done.wait(rng.uniform(1, 3))


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


# --- comparison -------------------------------------------------------------------------------


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in r.items() if k != "time_s"} for r in csv.DictReader(f)]


def compare(ref: Path, run: Path) -> dict:
    """The chaos run's results, metrics rows and checkpoints against the straight run's."""
    import torch

    from cmpnn_dist.runs.checkpoint import load_checkpoint

    out: dict = {}
    mine, theirs = (json.loads((r / "results.json").read_text()) for r in (run, ref))
    out["results_equal"] = all(mine.get(k) == theirs.get(k) for k in ("valid", "test"))
    out["test"] = {"straight": theirs.get("test"), "chaos": mine.get("test")}
    a, b = _rows(ref), _rows(run)
    train = [r for r in a if r["kind"] == "train"]
    out["metrics_rows"] = {"straight": len(a), "chaos": len(b), "train_rows": len(train)}
    out["metrics_equal"] = a == b
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    out["first_row_difference"] = (
        None if not diff else {"row": diff[0], "straight": a[diff[0]], "chaos": b[diff[0]]}
    )
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    ref_names = sorted(p.name for p in (ref / "checkpoints").iterdir())
    out["checkpoints"] = {"straight": ref_names, "chaos": names}
    weights = {}
    for name in sorted({"best", ref_names[-1]} & set(names)):  # step_* sort after best
        x = load_checkpoint(run / "checkpoints" / name)
        y = load_checkpoint(ref / "checkpoints" / name)
        same = x["step"] == y["step"] and x["model"].keys() == y["model"].keys()
        weights[name] = same and all(torch.equal(x["model"][k], y["model"][k]) for k in y["model"])
    out["weights_equal"] = weights
    out["identical"] = (
        out["results_equal"] and out["metrics_equal"] and names == ref_names
        and len(weights) == 2 and all(weights.values())
    )  # fmt: skip
    return out


# --- the run and its report -----------------------------------------------------------------


def machine() -> str:
    system = f"{platform.system()} {platform.release()}"
    return f"{cpu_model()}, {os.cpu_count()} cores, no GPU, {system}"


def straight_run(args: argparse.Namespace, root: Path, logs: Path) -> dict:
    """Run the command once, alone (a finished one left in ``--work`` by the same command is
    reused: its log's first line is the command)."""
    log = logs / "straight.log"
    cmd = child_command(train_cmd(args, root))
    if (root / "runs" / RUN / "results.json").exists() and log.exists():
        if log.read_text().splitlines()[0] == cmd:
            return {"exit": 0, "wall_s": None, "reused": str(root)}
    start, failed_starts = time.monotonic(), []
    with open(log, "w") as f:
        f.write(cmd + "\n")
        f.flush()
        for _ in range(3):
            rc = _start(train_cmd(args, root), stdout=f, stderr=subprocess.STDOUT).wait()
            if rc == 0 or newest_step(root / "runs" / RUN) >= 0:
                break
            # failed before its first checkpoint (e.g. Ray's 30 s raylet registration timeout
            # on a loaded machine): nothing trained, the run folder removed; start it again
            f.flush()
            failed_starts.append(_last_line(log.read_text(errors="replace")))
            print(f"straight run: start failed, again: {failed_starts[-1]}", flush=True)
    return {
        "exit": rc,
        "wall_s": round(time.monotonic() - start, 1),
        "failed_starts": failed_starts,
    }


def chaos_run(args: argparse.Namespace, root: Path, logs: Path) -> tuple[Chaos, float]:
    chaos = Chaos(args, root, logs)
    threads = [threading.Thread(target=chaos.supervise, name="supervisor")]
    threads.append(threading.Thread(target=chaos.strike, name="chaos", daemon=True))
    threads += [
        threading.Thread(target=chaos.read, args=(i,), name=f"reader{i}", daemon=True)
        for i in range(args.readers)
    ]
    for t in threads:
        t.start()
    threads[0].join()
    for t in threads[1:]:
        t.join(timeout=600)  # a reader finishes the read it is in
    return chaos, chaos.now()


def summarize(args: argparse.Namespace, chaos: Chaos, wall: float, straight: dict,
              comparison: dict | None, load: dict, started: str, commit: str) -> dict:  # fmt: skip
    reads = Counter(r["outcome"] for r in chaos.reads)
    tools = Counter(f"{r['tool']}:{r['outcome']}" for r in chaos.reads)
    finished = bool(chaos.attempts) and chaos.attempts[-1]["exit"] == 0
    identical = bool(comparison and comparison["identical"])
    return {
        "command": command_line(__file__, sys.argv[1:]),
        "train_command": child_command(train_cmd(args, Path("<root>"))),
        "machine": machine(),
        "load": load,
        "commit": commit,
        "date": started,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")},
        "straight": straight,
        "chaos_wall_s": wall,
        "faults": len(chaos.faults),
        "faults_by_class": dict(Counter(f["class"] for f in chaos.faults)),
        "faults_by_kind": dict(Counter(f["kind"] for f in chaos.faults)),
        "faults_deferred_for_progress": chaos.deferred,
        "fault_log": chaos.faults,
        "attempts": chaos.attempts,
        "restarts": max(0, len(chaos.attempts) - 1),
        "in_job_retries": sum(max(0, a["worker_groups"] - 1) for a in chaos.attempts),
        "hung_attempts": sum(a["hung"] for a in chaos.attempts),
        "reads": {"total": len(chaos.reads), **reads, "by_tool": dict(tools)},
        "reader_failures": [r for r in chaos.reads if r["outcome"] == "failed"],
        "reader_fallback_lines": sum(len(r["fallback_lines"]) for r in chaos.reads),
        "finished": finished,
        "comparison": comparison,
        "identical": identical,
        "ok": finished and identical and reads["failed"] == 0 and straight["exit"] == 0,
    }


def markdown(s: dict) -> str:
    c = s["comparison"] or {}
    lines = [
        "# Chaos run: Ray training (2 workers) under random SIGKILLs, with live readers",
        "",
        f"- command: `{s['command']}`",
        f"- train command (both runs, storage roots apart): `{s['train_command']}`",
        f"- machine: {s['machine']}",
        f"- load: {s['load']['note']}; 1-minute load average {s['load']['start']:.1f} at start, "
        f"{s['load']['end']:.1f} at end",
        f"- commit: {s['commit']}",
        f"- date: {s['date']}",
        "",
        f"**Result: {'finished, identical to the straight run' if s['ok'] else 'NOT OK'}.** "
        f"{s['faults']} faults survived ({s['restarts']} restarts of the command by the "
        f"supervisor, {s['in_job_retries']} worker groups restarted inside a job by Ray Train), "
        f"{s['reads']['total']} reads beside it, {len(s['reader_failures'])} reader failures.",
        "",
        f"Straight run: exit {s['straight']['exit']}, {s['straight']['wall_s']} s wall. "
        f"Chaos run: {s['chaos_wall_s']} s wall, {len(s['attempts'])} attempts.",
        "",
        "## Faults (SIGKILL; `corrupt_newest`: a byte flipped in the newest checkpoint)",
        "",
        "| class | kind | count |",
        "|---|---|---|",
    ]
    kinds = Counter((f["class"], f["kind"]) for f in s["fault_log"])
    lines += [f"| {cl} | {k} | {n} |" for (cl, k), n in sorted(kinds.items())]
    lines += ["", "| t (s) | attempt | victim | pid | newest checkpoint | last logged step |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    lines += [
        f"| {f['t_s']} | {f['attempt']} | {f['kind']} | {f['pid']} | {f['newest_checkpoint']} "
        f"| {f['last_logged_step']} |"
        for f in s["fault_log"]
    ]
    lines += ["", f"Faults deferred until a new checkpoint: {s['faults_deferred_for_progress']}.",
              "", "## Attempts (the supervisor)", "",
              "| attempt | start (s) | end (s) | exit | worker groups | resumed from | last line |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for a in s["attempts"]:
        last = a["last_line"].replace("|", "\\|")[:160]
        lines.append(f"| {a['attempt']} | {a['start_s']} | {a['end_s']} | {a['exit']} | "
                     f"{a['worker_groups']} | {a['resumes_from']} | `{last}` |")  # fmt: skip
    r = s["reads"]
    lines += ["", "## Readers", "",
              f"{r['total']} reads: {r.get('ok', 0)} ok, {r.get('not_yet', 0)} before the first "
              f"checkpoint (the documented one line), {r.get('failed', 0)} failed; "
              f"{s['reader_fallback_lines']} fallback lines. By tool: {r['by_tool']}."]  # fmt: skip
    if len(s["reader_failures"]) > 5:
        lines += ["", "The first 5 failures (every one is in the JSON file):"]
    for f in s["reader_failures"][:5]:
        lines += ["", f"- {f['tool']} exit {f['exit']}:", "", "```", f["stderr_tail"], "```"]
    lines += ["", "## Comparison with the straight run", ""]
    if c:
        lines += [
            f"- results.json valid and test metrics equal: {c['results_equal']} "
            f"(test MRR {c['test']['straight'].get('mrr')} straight, "
            f"{(c['test']['chaos'] or {}).get('mrr')} chaos)",
            f"- metrics.csv rows equal, `time_s` aside: {c['metrics_equal']} "
            f"({c['metrics_rows']['straight']} / {c['metrics_rows']['chaos']} rows, "
            f"{c['metrics_rows']['train_rows']} training losses)",
            f"- checkpoints: {c['checkpoints']['chaos']} "
            f"(straight: {c['checkpoints']['straight']})",
            f"- weights equal (torch.equal): {c['weights_equal']}",
        ]
        if c["first_row_difference"]:
            lines.append(f"- first differing row: {c['first_row_difference']}")
    else:
        lines.append("- not compared: a run did not finish")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("--steps", type=int, default=300, help="train.max_steps")
    p.add_argument("--every-steps", type=int, default=5, help="checkpoint.every_steps")
    p.add_argument("--interval", type=float, default=40.0, help="seconds between faults")
    p.add_argument("--jitter", type=float, default=0.5, help="interval x U[1-j, 1+j]")
    p.add_argument("--faults", type=int, default=0, help="stop after this many (0: no limit)")
    p.add_argument("--seed", type=int, default=0, help="the chaos RNG's seed")
    p.add_argument(
        "--corrupt-once",
        action="store_true",
        help="flip a byte of the newest checkpoint after the first failed attempt",
    )
    p.add_argument("--readers", type=int, default=1, help="reader threads")
    p.add_argument("--eval-queries", type=int, default=16, help="the readers' eval.max_queries")
    p.add_argument("--max-failures", type=int, default=2, help="cluster.max_failures")
    p.add_argument("--collective-timeout", type=float, default=120.0)
    p.add_argument("--max-attempts", type=int, default=30, help="the supervisor's retries")
    p.add_argument("--hang-s", type=float, default=600.0, help="kill a driver this long idle")
    p.add_argument("--nice", type=int, default=15, help="nice level of the training (0: none)")
    p.add_argument("--set", nargs="*", default=[], help="more key=value for both runs")
    p.add_argument("--load-note", default="unknown", help="what else ran on the machine")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp)")
    p.add_argument("--out", type=Path, default=results_dir(__file__) / "chaos_cpu")
    args = p.parse_args()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_children)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    commit = git_commit("--short", mark_dirty=True)  # of the code that runs
    load_start = os.getloadavg()[0]
    work = args.work or Path(tempfile.mkdtemp(prefix="cmpnn-chaos-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {work}; chaos RNG seed {args.seed}", flush=True)
    straight = straight_run(args, work / "straight", logs)
    print(f"straight run: {straight}", flush=True)
    if straight["exit"] != 0:
        print(f"error: the straight run failed (exit {straight['exit']}): see {logs}/straight.log")
        return 1
    chaos, wall = chaos_run(args, work / "chaos", logs)
    ref, run = work / "straight" / "runs" / RUN, work / "chaos" / "runs" / RUN
    done = straight["exit"] == 0 and chaos.attempts and chaos.attempts[-1]["exit"] == 0
    comparison = compare(ref, run) if done else None
    load = {"start": load_start, "end": os.getloadavg()[0], "note": args.load_note}
    s = summarize(args, chaos, wall, straight, comparison, load, started, commit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out.with_suffix(".json"), json.dumps(s, indent=1) + "\n")
    write_atomic(args.out.with_suffix(".md"), markdown(s))
    print(markdown(s))
    if args.work is None and s["ok"]:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
