"""Load test of the HTTP server: requests/s and p50 / p99 latency of ``POST /predict`` with
``serve.batching`` on and off, at 1, 8 and 32 concurrent clients (localhost only, bounded).

Two servers run side by side (``python -m cmpnn_dist.serve``, one replica each, the same
checkpoint; one with batching, one without) on free local ports; each round measures every
(clients, batching) cell for ``--seconds`` s, the two servers interleaved, and the figures are
medians over ``--rounds`` rounds.  Each client sends its next request as soon as the last one
is answered (a closed loop, one keep-alive connection per client); a request asks the top 10
tails of ``(head, t0, ?)`` for a head cycling through the type-A entities.  The forward
passes each server ran (``/health``) give the mean batch size.

    python -m benchmarks.serving.serve_load                     # trains a default-graph model first
    python -m benchmarks.serving.serve_load --ckpt storage/runs/demo --rounds 3 --seconds 10

Results: ``benchmarks/results/serving/serve_load_cpu.md`` and ``.json`` (``--out``: the stem).
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.harness.args import make_parser
from benchmarks.harness.provenance import REPO, command_line, git_commit
from benchmarks.harness.results import write_atomic
from cmpnn_dist.serve.launch import quiet_port


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path[1:]])}


def train(root: Path) -> Path:
    cmd = [sys.executable, "-m", "cmpnn_dist.train", "train.max_steps=20",
           f"storage_root={root}", "run_name=load", "train.progress=false"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env(), capture_output=True, timeout=1800)
    return root / "runs" / "load"


def get(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    return json.loads(conn.getresponse().read())


def start_server(ckpt: Path, batching: bool, log: Path) -> tuple[subprocess.Popen, int]:
    port = quiet_port()
    cmd = [sys.executable, "-m", "cmpnn_dist.serve", f"ckpt={ckpt}", f"serve.port={port}",
           f"serve.batching={str(batching).lower()}"]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env())
    return proc, port


def wait_ready(proc: subprocess.Popen, port: int, log: Path, timeout_s: float = 900) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"error: a server exited: {log.read_text()[-2000:]}")
        try:
            if get(port, "/health")["status"] == "ok":
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(1.0)
    sys.exit(f"error: a server did not answer /health in {timeout_s} s ({log})")


def run_cell(
    port: int, clients: int, seconds: float, heads: list[str], health: bool = False
) -> dict:
    """``clients`` closed-loop clients for ``seconds`` s -> requests/s, p50 / p99 (ms).
    ``health``: ``GET /health`` instead (no model work: the HTTP path's own ceiling)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    start_at = time.perf_counter() + 0.2
    stop_at = start_at + seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        n = i
        while time.perf_counter() < start_at:
            time.sleep(0.001)
        while True:
            body = json.dumps({"head": heads[n % len(heads)], "relation": "t0", "k": 10})
            t0 = time.perf_counter()
            if t0 >= stop_at:
                break
            if health:
                conn.request("GET", "/health")
            else:
                conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                errors[i] += 1
            latencies[i].append(time.perf_counter() - t0)
            n += clients
        conn.close()

    before = get(port, "/health")
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = max(time.perf_counter() - start_at, 1e-9)
    after = get(port, "/health")
    lat = sorted(x for per in latencies for x in per)
    done = len(lat)
    forwards = after["forwards"] - before["forwards"]
    return {
        "requests": done,
        "errors": sum(errors),
        "requests_per_s": done / elapsed,
        "p50_ms": 1000 * lat[int(0.50 * (done - 1))] if done else None,
        "p99_ms": 1000 * lat[int(0.99 * (done - 1))] if done else None,
        "forwards": forwards,
        "mean_batch": done / forwards if forwards else None,
    }


def main() -> None:
    ap = make_parser(__doc__, __file__)
    ap.add_argument("--ckpt", help="checkpoint or run folder (default: train one, 20 steps)")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0, help="per cell and round")
    ap.add_argument("--load", default="", help="what else ran on the machine (for the header)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/serve_load_cpu"))
    args = ap.parse_args()
    if args.rounds < 1 or args.seconds <= 0 or min(args.clients) < 1 or max(args.clients) > 256:
        sys.exit("error: --rounds >= 1, --seconds > 0, --clients in [1, 256]")
    command = command_line(__file__, sys.argv[1:])
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        tmpdir = Path(tmp)
        ckpt = Path(args.ckpt) if args.ckpt else train(tmpdir / "storage")
        servers = {}
        for batching in (True, False):
            log = tmpdir / f"server_{batching}.log"
            servers[batching] = (*start_server(ckpt.resolve(), batching, log), log)
        try:
            for proc, port, log in servers.values():
                wait_ready(proc, port, log)
            names = get(servers[True][1], "/entities?prefix=A::&limit=1000")["entities"]
            for _, port, _ in servers.values():  # warm-up: first requests load lazily
                run_cell(port, 4, 2.0, names)
            cells: dict[str, list[dict]] = {}
            for rnd in range(args.rounds):
                top = max(args.clients)  # the HTTP path alone: GET /health, no model work
                r = run_cell(servers[False][1], top, args.seconds, names, health=True)
                cells.setdefault(f"health_{top}", []).append(r)
                rate, p50, p99 = r["requests_per_s"], r["p50_ms"], r["p99_ms"]
                print(f"round {rnd + 1} health_{top}: {rate:.1f} req/s, p50 {p50:.1f} ms, "
                      f"p99 {p99:.1f} ms", flush=True)  # fmt: skip
                for clients in args.clients:
                    order = (True, False) if rnd % 2 == 0 else (False, True)
                    for batching in order:
                        r = run_cell(servers[batching][1], clients, args.seconds, names)
                        key = f"{'on' if batching else 'off'}_{clients}"
                        cells.setdefault(key, []).append(r)
                        print(f"round {rnd + 1} {key}: {r['requests_per_s']:.1f} req/s, "
                              f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                              f"mean batch {r['mean_batch'] or 0:.1f}", flush=True)  # fmt: skip
        finally:
            for proc, _, _ in servers.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc, _, _ in servers.values():
                try:
                    proc.wait(180)
                except subprocess.TimeoutExpired:
                    proc.kill()
    load_end = os.getloadavg()
    med = {
        key: {
            m: statistics.median(r[m] for r in rs) for m in ("requests_per_s", "p50_ms", "p99_ms")
        }
        | {"mean_batch": statistics.median(r["mean_batch"] or 0 for r in rs)}
        | {"errors": sum(r["errors"] for r in rs), "rounds": [r for r in rs]}
        for key, rs in cells.items()
    }
    import torch

    machine = (f"{platform.machine()}, {os.cpu_count()} CPU cores, no GPU used; "
               f"{platform.platform()}; torch {torch.__version__}")  # fmt: skip
    load = (f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end"
            + (f"; {args.load}" if args.load else ""))  # fmt: skip
    header = {
        "command": command,
        "machine": machine,
        "load": load,
        "commit": git_commit("--short", mark_dirty=True),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    top = max(args.clients)
    ratio = med[f"on_{top}"]["requests_per_s"] / med[f"off_{top}"]["requests_per_s"]
    summary = {
        "clients": top,
        "speedup_requests_per_s": ratio,
        "p99_on_ms": med[f"on_{top}"]["p99_ms"],
        "p99_off_ms": med[f"off_{top}"]["p99_ms"],
    }
    result = {**header, "rounds": args.rounds, "seconds": args.seconds, "cells": med,
              "summary": summary}  # fmt: skip
    out = Path(args.out)
    write_atomic(out.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
    lines = [
        "# Serving load test: batching on and off (`POST /predict`)",
        "",
        *(f"- {k}: {v}" for k, v in header.items()),
        f"- setup: one replica per server (1 CPU, 1 torch thread), default-graph checkpoint "
        f"(4 x 32, 1,000 entities), top 10 tails of (head, t0, ?); closed-loop clients with "
        f"keep-alive connections; {args.seconds:g} s per cell, medians of {args.rounds} "
        f"interleaved rounds; batching: `serve.max_batch_size=32`, `serve.batch_wait_ms=5`",
        "",
        "| clients | batching | requests/s | p50 ms | p99 ms | requests per forward | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for clients in args.clients:
        for mode in ("on", "off"):
            c = med[f"{mode}_{clients}"]
            lines.append(
                f"| {clients} | {mode} | {c['requests_per_s']:.1f} | {c['p50_ms']:.1f} | "
                f"{c['p99_ms']:.1f} | {c['mean_batch'] or 0:.1f} | {c['errors']} |"
            )
    h = med[f"health_{top}"]
    lines.append(
        f"| {top} | `GET /health` (no model) | {h['requests_per_s']:.1f} | {h['p50_ms']:.1f} | "
        f"{h['p99_ms']:.1f} | | {h['errors']} |"
    )
    lines += [
        "",
        f"At {top} clients batching serves {ratio:.2f}x the requests/s, p99 "
        f"{summary['p99_on_ms']:.0f} ms against {summary['p99_off_ms']:.0f} ms.",
        "",
    ]
    write_atomic(out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
