#!/usr/bin/env python3
"""Load-balancer overhead and failure detection (a benchmark, not a test).

Starts one tritonserver from a spec and HAProxy in front of it (same config as the cluster), then:
  1. the same closed-loop load direct to the server and through HAProxy: p50/p99 latency and
     requests/s, for /v2/health/ready (pure proxy cost) and for generate (max_tokens 1 and 16);
  2. failure detection: SIGSTOP (hung server; checks time out) and kill -9 (connection refused),
     time from the fault to HAProxy marking the server DOWN.

    python tools/bench_lb.py [--spec specs/tiny.yaml] [--concurrency 4] [--requests 400]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.cluster import Cluster
from llmserve.deploy.tritonserver import free_ports
from llmserve.repository.writer import write_repository
from llmserve.spec import load_spec


def run_load(url: str, body: dict | None, n: int, conc: int) -> dict:
    lat, errors, lock = [], 0, threading.Lock()
    left = [n]

    def worker():
        nonlocal errors
        s = requests.Session()
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t = time.perf_counter()
            r = s.post(url, json=body, timeout=120) if body is not None else s.get(url, timeout=30)
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                errors += r.status_code != 200

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "p50_ms": round(statistics.median(lat) * 1000, 2),
        "p99_ms": round(lat[int(len(lat) * 0.99) - 1] * 1000, 2),
        "req_s": round(n / wall, 1),
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default="specs/tiny.yaml")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    spec = load_spec(args.spec)
    build_checkpoint(spec)
    work = Path(tempfile.mkdtemp(prefix="bench-lb-"))
    repo = work / "model_repository"
    write_repository(spec, Path(args.spec).name, repo)
    p = free_ports(6)
    cluster = Cluster(spec, repo, work, replicas=1, replica_ports=[tuple(p[:3])], lb_ports=tuple(p[3:]))
    results = {
        "spec": args.spec,
        "concurrency": args.concurrency,
        "requests": args.requests,
        "check": spec.ha.check.model_dump(),
    }
    try:
        cluster.start()
        direct, lb = f"http://127.0.0.1:{p[0]}", f"http://127.0.0.1:{p[3]}"
        cases = [
            ("health_ready", "/v2/health/ready", None, args.requests * 5),
            ("generate_1_token", "/v2/models/ensemble/generate", {"text_input": "Hi", "max_tokens": 1}, args.requests),
            (
                "generate_16_tokens",
                "/v2/models/ensemble/generate",
                {"text_input": "Hi", "max_tokens": 16},
                args.requests // 2,
            ),
        ]
        for name, path, body, n in cases:
            run_load(direct + path, body, max(20, n // 10), args.concurrency)  # warm-up
            d = run_load(direct + path, body, n, args.concurrency)
            h = run_load(lb + path, body, n, args.concurrency)
            results[name] = {
                "direct": d,
                "haproxy": h,
                "p50_overhead_ms": round(h["p50_ms"] - d["p50_ms"], 2),
                "throughput_ratio": round(h["req_s"] / d["req_s"], 3),
            }
            print(f"{name:20s} direct {d}\n{'':20s} haproxy {h}", flush=True)
        r = cluster.replicas[0]
        # Hung server: SIGSTOP the whole process group; checks time out.
        os.killpg(r.pid, signal.SIGSTOP)
        t = time.monotonic()
        cluster.api.wait_status(r.name, "DOWN", 30)
        results["detect_hung_s"] = round(time.monotonic() - t, 2)
        os.killpg(r.pid, signal.SIGCONT)
        t = time.monotonic()
        cluster.api.wait_status(r.name, "UP", 30)
        results["recover_after_sigcont_s"] = round(time.monotonic() - t, 2)
        # Crash: kill -9; checks get connection refused.
        t = time.monotonic()
        r.kill()
        cluster.api.wait_status(r.name, "DOWN", 30)
        results["detect_kill9_s"] = round(time.monotonic() - t, 2)
        print(json.dumps(results, indent=1))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
