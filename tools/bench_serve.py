#!/usr/bin/env python3
"""Start a server for a spec, run tools/bench.py against it, and record the server's peak memory
(RSS summed over tritonserver and its Python stubs, sampled every 0.5 s).

    python tools/bench_serve.py --spec specs/default.yaml --out results/cpu-default -- \\
        --concurrency 1,8 --input-len 64 --output-len 32 --duration 30
"""

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from llmserve.bench.soak import sample, start_server
from llmserve.spec import ROOT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default="specs/default.yaml")
    ap.add_argument("--out", required=True)
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments after -- go to tools/bench.py")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = Path(args.spec).resolve()
    repo = ROOT / "model_repository" if spec == ROOT / "specs/default.yaml" else None
    server = start_server(spec, Path(tempfile.mkdtemp()), repository=repo)
    http, grpc = f"localhost:{server.http_port}", f"localhost:{server.grpc_port}"
    peak, stop = {"rss_kb": 0}, threading.Event()

    def watch():
        while not stop.wait(0.5):
            total = sum(p["rss_kb"] for p in sample(server.proc.pid).values())
            peak["rss_kb"] = max(peak["rss_kb"], total)

    threading.Thread(target=watch, daemon=True).start()
    try:
        extra = [a for a in args.bench_args if a != "--"]
        cmd = [
            sys.executable,
            str(ROOT / "tools/bench.py"),
            "--url",
            grpc,
            "--http-url",
            http,
            "--spec",
            str(spec),
            "--out",
            str(out),
            *extra,
        ]
        rc = subprocess.call(cmd)
    finally:
        stop.set()
        server.stop()
    (out / "server_memory.json").write_text(json.dumps({"peak_rss_mb": peak["rss_kb"] / 1024}, indent=2))
    print(f"server peak RSS (tritonserver + Python stubs): {peak['rss_kb'] / 1024:.0f} MiB")
    return rc


if __name__ == "__main__":
    sys.exit(main())
