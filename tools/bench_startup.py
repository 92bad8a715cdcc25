#!/usr/bin/env python3
"""How long a tritonserver takes to start and to stop: what a replica's restart costs in a rolling
restart, a failover or a CI run (every server test starts one).

Starts a real tritonserver on a model repository (the committed default one unless `--repo`)
`--repeat` times and prints, per start: seconds from launch to ready, when each model finished
loading (from the server's own log), and seconds from SIGTERM to exit.

    python tools/bench_startup.py [--repo model_repository] [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llmserve.deploy.tritonserver import TritonProcess, free_ports
from llmserve.spec import ROOT

LOADED = re.compile(r"(\d\d):(\d\d):(\d\d\.\d+).*successfully loaded '([^']+)'")


def _clock_s(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def one_start(repo: Path, log: Path) -> tuple[float, dict[str, float], float]:
    http, grpc, metrics = free_ports(3)
    proc = TritonProcess(repo, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=10, log_path=log)
    wall0, t0 = time.time(), time.monotonic()
    proc.start()
    try:
        proc.wait_ready(timeout_s=600)
    except RuntimeError:
        print(log.read_text()[-3000:], file=sys.stderr)
        proc.stop()
        raise
    ready = time.monotonic() - t0
    # The log's clock is UTC wall time of day: each model's load end as seconds after the launch.
    day0 = _clock_s(*time.strftime("%H %M %S", time.gmtime(wall0)).split()) + (wall0 % 1)
    loaded = {m[4]: _clock_s(m[1], m[2], m[3]) - day0 for m in LOADED.finditer(log.read_text())}
    t1 = time.monotonic()
    proc.stop()
    return ready, loaded, time.monotonic() - t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", default=str(ROOT / "model_repository"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    readies, stops = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            ready, loaded, stop = one_start(repo, Path(tmp) / f"server{i}.log")
            readies.append(ready)
            stops.append(stop)
            models = ", ".join(f"{name} {s:.1f}" for name, s in sorted(loaded.items(), key=lambda kv: kv[1]))
            print(f"start {i + 1}: ready after {ready:.1f} s (models loaded at: {models}); stopped in {stop:.1f} s")
    print(f"median: ready after {statistics.median(readies):.1f} s, stopped in {statistics.median(stops):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
