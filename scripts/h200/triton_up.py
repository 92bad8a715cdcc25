"""Start tritonserver (from the carried nvidia-pytriton files) on the rendered bench-1b repository in
its own session, wait until ready, print its PID. Usage: triton_up.py REPO HTTP GRPC METRICS LOG
TRITON_EXTRA (space-separated) adds tritonserver flags, e.g. TRITON_EXTRA=--http-thread-count=32."""

import os
import sys
import time
from pathlib import Path

from llmserve.deploy.tritonserver import TritonProcess

repo, http, grpc, metrics, log = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
t0 = time.time()
p = TritonProcess(
    repo,
    http_port=http,
    grpc_port=grpc,
    metrics_port=metrics,
    exit_timeout_s=30,
    log_path=Path(log),
    extra=os.environ.get("TRITON_EXTRA", "").split(),
)
p.start()
try:
    p.wait_ready(timeout_s=400)
except Exception as e:
    print(f"tritonserver failed: {e}", flush=True)
    print(open(log).read()[-6000:])
    p.stop()
    sys.exit(1)
print(f"tritonserver ready in {time.time() - t0:.1f} s, pid {p.proc.pid}", flush=True)
open(log + ".pid", "w").write(str(p.proc.pid))
