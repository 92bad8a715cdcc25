#!/usr/bin/env python3
"""The tensorrtllm layout with the relay reading the stand-in over gRPC against HTTP generate_stream
(engine.tensorrtllm.relay_transport), and the torch layout beside them (`--transports grpc,http,torch`), on
real tritonservers with the null engine: one server per transport, all up at once, the transports alternating; each point a tools/bench.py run. Prints one JSON
line per point: tok/s, TTFT p50 and the CPU per streamed token of tritonserver with its stubs.

    python tools/bench_relay_transport.py [--concurrency 8] [--targets ensemble,tensorrt_llm] [--rounds 2]
        [--request-rate R]  (open loop; in flight capped at 4 x --concurrency)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from llmserve.bench.cpu import tree_cpu_seconds
from llmserve.bench.soak import start_server
from llmserve.checkpoint import build_checkpoint
from llmserve.engine.null_model import NULL_STEP_ENV
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

# "torch": the torch layout of --torch-spec, its engine chunking at the same interval (goal 2's yardstick).
TRANSPORTS = ("grpc", "http", "torch")


def serve(args, transport: str, work: Path):
    """A tensorrtllm-layout server of --spec whose relay reads over `transport`, or the torch layout."""
    spec_file = (args.torch_spec if transport == "torch" else args.spec).resolve()
    data = yaml.safe_load(spec_file.read_text())
    if transport == "torch":
        data["engine"].setdefault("torch", {})["stream_interval_ms"] = args.interval_ms
    else:
        trt = data["engine"].setdefault("tensorrtllm", {})
        trt["relay_transport"], trt["relay_stream_interval_ms"] = transport, args.interval_ms
    path = work / f"{spec_file.stem}-{transport}.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_spec(path)
    build_checkpoint(spec)  # first: the stand-in's repository needs the checkpoint's tokenizer
    repo = work / f"model_repository-{transport}"
    write_repository(spec, path.name, repo, standin=transport != "torch")
    print(f"starting tritonserver ({transport}) on {repo} ...", file=sys.stderr, flush=True)
    return start_server(path, work, repository=repo)


def point(server, target: str, args, out: Path) -> dict:
    cpu0 = tree_cpu_seconds(server.proc.pid)
    cmd = [sys.executable, str(ROOT / "tools/bench.py"), "--url", f"localhost:{server.grpc_port}"]
    load = ["--concurrency", str(args.concurrency)]
    if args.request_rate:  # open loop: the TTFT of both transports at one arrival rate
        load = ["--request-rate", str(args.request_rate), "--max-concurrency", str(4 * args.concurrency)]
    cmd += ["--http-url", f"localhost:{server.http_port}", "--targets", target, *load]
    cmd += ["--input-len", "128", "--output-len", str(args.tokens), "--duration", str(args.duration)]
    cmd += ["--spec", str(args.spec), "--no-progress", "--out", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    cpu = tree_cpu_seconds(server.proc.pid) - cpu0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    s = run["summary"]
    # The server's CPU over the whole run (its warm-up requests too) per token of the measured window: a
    # few percent high, the same for both transports.
    return {
        "target": target,
        "load": f"{args.request_rate} requests/s" if args.request_rate else f"c={args.concurrency}",
        "tok_per_s": round(s["output_tokens_per_s"]),
        "ttft_p50_ms": s["ttft_ms"]["p50"],
        "errors": s["errors"],
        "server_us_per_token": round(cpu / max(s["output_tokens"], 1) * 1e6, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", type=Path, default=ROOT / "specs/tiny-trtllm.yaml")
    ap.add_argument("--torch-spec", type=Path, default=ROOT / "specs/tiny.yaml")
    ap.add_argument("--transports", default="grpc,http", help=f"comma-separated, of {', '.join(TRANSPORTS)}")
    ap.add_argument("--targets", default="ensemble,tensorrt_llm", help="tools/bench.py targets")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--request-rate", type=float, help="Poisson arrivals instead of --concurrency streams")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval-ms", type=float, default=20.0, help="engine.tensorrtllm.relay_stream_interval_ms")
    ap.add_argument("--step-ms", type=float, default=1.0, help="the null engine's step time")
    args = ap.parse_args()
    transports = args.transports.split(",")
    if unknown := sorted(set(transports) - set(TRANSPORTS)):
        ap.error(f"--transports: unknown {', '.join(unknown)}")
    os.environ[NULL_STEP_ENV] = str(args.step_ms)
    work = Path(tempfile.mkdtemp(prefix="relay-transport-"))
    servers = {}
    try:
        for t in transports:
            servers[t] = serve(args, t, work)
        for r in range(args.rounds):
            for target in args.targets.split(","):
                for t in transports:
                    result = point(servers[t], target, args, work / f"b-{t}-{target}-{r}")
                    print(json.dumps({"transport": t, **result}), flush=True)
    finally:
        for s in servers.values():
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
