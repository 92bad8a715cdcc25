#!/usr/bin/env python3
"""The OpenAI frontend's CPU time per streamed token, on a real tritonserver with the null engine.

Starts tritonserver on a spec's layout (tensorrtllm: the CI stand-in behind the relay, one response
per token as the C++ backend sends; torch: the torch engine) with the null engine
(LLMSERVE_NULL_STEP_MS), one frontend with --workers N in front of it, and tools/bench.py's openai
target (128 in / 128 out, exact); reports the frontend's CPU seconds (all its processes) per token.

    python tools/frontend_cpu.py [--spec specs/tiny-trtllm.yaml] [--concurrency 8] [--duration 20] \\
        [--workers 1] [--token-model auto|none|NAME] [--transport grpc|http] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from llmserve.bench.cpu import tree_cpu_seconds
from llmserve.bench.soak import start_server
from llmserve.deploy.frontend import FrontendProcess
from llmserve.deploy.tritonserver import free_ports
from llmserve.engine.null_model import NULL_STEP_ENV
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "specs/tiny-trtllm.yaml"))
    ap.add_argument("--concurrency", default="8")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--token-model", default="auto")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--transport", choices=["grpc", "http"], help="openai.token_transport (default: the spec's)")
    ap.add_argument("--step-ms", type=float, default=1.0, help="the null engine's step time")
    args = ap.parse_args()
    os.environ[NULL_STEP_ENV] = str(args.step_ms)
    spec_path = Path(args.spec).resolve()
    spec = load_spec(spec_path)
    work = Path(tempfile.mkdtemp(prefix="frontend-cpu-"))
    repo = work / "model_repository"
    write_repository(spec, spec_path.name, repo, standin=spec.engine.kind == "tensorrtllm")
    print(f"starting tritonserver on {repo} ...", file=sys.stderr, flush=True)
    server = start_server(spec_path, work, repository=repo)
    port = free_ports(1)[0]
    frontend_spec = spec_path
    if args.transport:  # the same spec with openai.token_transport set
        data = yaml.safe_load(spec_path.read_text())
        data.setdefault("openai", {})["token_transport"] = args.transport
        frontend_spec = work / spec_path.name
        frontend_spec.write_text(yaml.safe_dump(data))
    frontend = FrontendProcess(
        frontend_spec,
        port=port,
        triton=[f"localhost:{server.grpc_port}"],
        triton_http=[f"localhost:{server.http_port}"],
        log_path=work / "frontend.log",
        workers=args.workers,
        token_model=args.token_model,
    )
    try:
        frontend.start()
        frontend.wait_ready(timeout_s=120)
        bench = [
            sys.executable,
            str(ROOT / "tools/bench.py"),
            "--targets",
            "openai",
            "--openai-url",
            f"localhost:{port}",
            "--spec",
            str(spec_path),
            "--concurrency",
            args.concurrency,
            "--input-len",
            "128",
            "--output-len",
            "128",
            "--duration",
            str(args.duration),
            "--no-progress",
        ]
        for r in range(args.rounds):
            out = work / f"bench-{r}"
            c0, t0 = tree_cpu_seconds(frontend.proc.pid), time.monotonic()
            subprocess.run([*bench, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
            cpu, wall = tree_cpu_seconds(frontend.proc.pid) - c0, time.monotonic() - t0
            runs = json.loads((out / "results.json").read_text())["runs"]
            tokens = sum(x["summary"]["output_tokens"] for x in runs)
            summary = runs[0]["summary"] if len(runs) == 1 else {}
            print(
                json.dumps(
                    {
                        "tok_per_s": summary.get("output_tokens_per_s"),
                        "ttft_p50_ms": (summary.get("ttft_ms") or {}).get("p50"),
                        "errors": sum(x["summary"]["errors"] for x in runs),
                        "frontend_cpu_s": round(cpu, 1),
                        "wall_s": round(wall, 1),
                        "frontend_us_per_token": round(cpu / max(tokens, 1) * 1e6),
                    }
                ),
                flush=True,
            )
    finally:
        frontend.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
