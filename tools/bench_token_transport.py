#!/usr/bin/env python3
"""What one streamed token costs a client of the token-level model, by transport: Triton's gRPC
ModelStreamInfer read with grpc.aio (`grpc`) against Triton's HTTP generate_stream read with aiohttp
(`http`, what the OpenAI frontend does by default, client/aio.py; one server-sent event per response).
Two more transports read with a thread per stream, as the tensorrtllm layout's relay does:
`grpc-threads` is the relay's gRPC reader (pipeline/backend_grpc.py, synchronous gRPC), `http-threads`
its HTTP one (pipeline/backend_http.py: generate_stream over http.client, pooled keep-alive connections).

Starts a tritonserver on the tensorrtllm layout (the CI stand-in for the C++ backend, one response
per token) with the null engine (LLMSERVE_NULL_STEP_MS), then runs the same closed-loop load over
each transport in turn, alternating, and reports the client's and tritonserver's (with its stubs)
CPU time per streamed token. Only the client's share differs by transport; it is the frontend's
per-token cost that docs/perf-gpu.md found to be the wall on this layout.

    python tools/bench_token_transport.py [--concurrency 8] [--requests 10] [--rounds 2]
        [--transports grpc,http,grpc-threads,http-threads]
    python tools/bench_token_transport.py --http HOST:PORT --grpc HOST:PORT --server-pid PID ...
        (a server already running, e.g. a GPU host's: scripts/h200/workers.sh READERS)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import grpc
import numpy as np
from tritonclient.grpc import service_pb2_grpc

from llmserve.bench.cpu import tree_cpu_seconds
from llmserve.bench.soak import start_server
from llmserve.checkpoint import build_checkpoint
from llmserve.client.wire import is_final, read_tokens, tensors, token_request
from llmserve.contract import ENGINE_INPUTS, by_name
from llmserve.engine.null_model import NULL_STEP_ENV
from llmserve.pipeline.backend_grpc import Backend
from llmserve.pipeline.backend_http import HttpBackend
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

MODEL = "tensorrt_llm_cpp"
TRANSPORTS = ("grpc", "http", "grpc-threads", "http-threads")


def body(tokens: int) -> dict:
    return {
        "input_ids": list(range(1, 129)),
        "input_lengths": 128,
        "request_output_len": tokens,
        "min_tokens": tokens,  # exact length
        "end_id": 2,
        "pad_id": 2,
        "streaming": True,
        "exclude_input_in_output": True,
    }


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def event_tokens(line: bytes) -> int:
    """The tokens of one line of a generate_stream response (0 for a line that is not an event)."""
    if not line.startswith(b"data: "):
        return 0
    event = json.loads(line[6:])
    if "error" in event:
        raise RuntimeError(event["error"])
    ids = event.get("output_ids")
    return len(ids) if isinstance(ids, list) else 1


async def http_stream(session: aiohttp.ClientSession, url: str, req: dict) -> int:
    n = 0
    async with session.post(f"http://{url}/v2/models/{MODEL}/generate_stream", json=req) as r:
        r.raise_for_status()
        async for line in r.content:
            n += event_tokens(line)
    return n


async def grpc_stream(stub, req: dict, rid: str) -> int:
    call, n = stub.ModelStreamInfer(), 0
    await call.write(token_request(req, rid, MODEL))
    while True:
        msg = await asyncio.wait_for(call.read(), 60)  # as client/aio.py reads
        if msg.error_message:
            raise RuntimeError(msg.error_message)
        got = read_tokens(msg.infer_response)
        if got is not None:
            n += len(got[0])
        if is_final(msg.infer_response):
            break
    await call.done_writing()
    while await call.read() is not grpc.aio.EOF:
        pass
    return n


def relay_arrays(req: dict) -> list[tuple[str, np.ndarray]]:
    """The body as the relay hands it to Backend.stream: [1, n] arrays, as the backend receives them."""
    return [(name, arr) for name, arr, _ in tensors(req, by_name(ENGINE_INPUTS))]


def relay_stream(backend, arrays, rid: str) -> int:
    """One stream read as the relay reads it: `backend` is its gRPC or HTTP reader."""
    n = 0
    for r in backend.stream(MODEL, arrays, ["output_ids", "sequence_length"], rid):
        if r.has_error():
            raise RuntimeError(r.error().message())
        outputs = {t.name(): t for t in r.output_tensors()}  # as pb.get_output_tensor_by_name reads them
        if "output_ids" in outputs:
            n += int(outputs["sequence_length"].as_numpy().reshape(-1)[0])
            outputs["output_ids"].as_numpy()
    return n


def run_threads(transport: str, http_url: str, grpc_url: str, server_pid: int, args) -> dict:
    """A thread per stream, as the relay runs: grpc-threads its gRPC reader, http-threads its HTTP one."""
    grpc_backend = Backend(grpc_url)
    backend = HttpBackend(http_url, grpc=grpc_backend) if transport == "http-threads" else grpc_backend
    arrays = relay_arrays(body(args.tokens))
    # Warm, all at once: every thread then finds a pooled connection (HTTP).
    warm = [
        threading.Thread(target=relay_stream, args=(backend, arrays, f"bench-w{w}")) for w in range(args.concurrency)
    ]
    for t in warm:
        t.start()
    for t in warm:
        t.join()
    counts = [0] * args.concurrency

    def worker(w: int) -> None:
        for k in range(args.requests):
            counts[w] += relay_stream(backend, arrays, f"bench-t{w * args.requests + k}")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.concurrency)]
    c0, s0, t0 = own_cpu(), tree_cpu_seconds(server_pid), time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summary(transport, sum(counts), time.monotonic() - t0, c0, s0, server_pid)


def summary(transport: str, tokens: int, wall: float, c0: float, s0: float, server_pid: int) -> dict:
    return {
        "transport": transport,
        "tokens": tokens,
        "tok_per_s": round(tokens / wall),
        "client_us_per_token": round((own_cpu() - c0) / tokens * 1e6, 1),
        "server_us_per_token": round((tree_cpu_seconds(server_pid) - s0) / tokens * 1e6, 1),
    }


async def run(transport: str, http_url: str, grpc_url: str, server_pid: int, args) -> dict:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    channel = grpc.aio.insecure_channel(grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    req = body(args.tokens)

    async def one(i: int) -> int:
        if transport == "http":
            return await http_stream(session, http_url, req)
        return await grpc_stream(stub, req, f"bench-{i}")

    await one(-1)  # warm: connections open
    tokens = 0

    async def worker(w: int) -> None:
        nonlocal tokens
        for k in range(args.requests):
            n = await one(w * args.requests + k)
            tokens += n

    c0, s0, t0 = own_cpu(), tree_cpu_seconds(server_pid), time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
    result = summary(transport, tokens, time.monotonic() - t0, c0, s0, server_pid)
    await session.close()
    await channel.close()
    return result


def measure(transports: list[str], http_url: str, grpc_url: str, server_pid: int, args) -> None:
    """Each transport in turn, `args.rounds` times, one JSON line each."""
    for _ in range(args.rounds):
        for transport in transports:
            if transport.endswith("-threads"):
                result = run_threads(transport, http_url, grpc_url, server_pid, args)
            else:
                result = asyncio.run(run(transport, http_url, grpc_url, server_pid, args))
            print(json.dumps({"concurrency": args.concurrency, **result}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "specs/tiny-trtllm.yaml"))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=10, help="per stream and round")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two transports")
    ap.add_argument("--transports", default="grpc,http", help=f"comma-separated, of {', '.join(TRANSPORTS)}")
    ap.add_argument("--step-ms", type=float, default=1.0, help="the null engine's step time")
    ap.add_argument("--http", help="a running server's HTTP host:port (none is started; with --grpc and --server-pid)")
    ap.add_argument("--grpc", help="its gRPC host:port")
    ap.add_argument("--server-pid", type=int, help="its tritonserver's pid (CPU counted with its stubs)")
    args = ap.parse_args()
    transports = args.transports.split(",")
    if unknown := sorted(set(transports) - set(TRANSPORTS)):
        ap.error(f"--transports: unknown {', '.join(unknown)} (known: {', '.join(TRANSPORTS)})")
    if args.http:
        if not (args.grpc and args.server_pid):
            ap.error("--http needs --grpc and --server-pid")
        measure(transports, args.http, args.grpc, args.server_pid, args)
        return 0
    os.environ[NULL_STEP_ENV] = str(args.step_ms)
    spec_path = Path(args.spec).resolve()
    spec = load_spec(spec_path)
    work = Path(tempfile.mkdtemp(prefix="token-transport-"))
    repo = work / "model_repository"
    build_checkpoint(spec)  # first: the stand-in's repository needs the checkpoint's tokenizer
    write_repository(spec, spec_path.name, repo, standin=spec.engine.kind == "tensorrtllm")
    print(f"starting tritonserver on {repo} ...", file=sys.stderr, flush=True)
    server = start_server(spec_path, work, repository=repo)
    try:
        measure(transports, f"localhost:{server.http_port}", f"localhost:{server.grpc_port}", server.proc.pid, args)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
