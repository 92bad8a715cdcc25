#!/usr/bin/env python3
"""What one streamed token costs a client of the token-level model, by transport: Triton's gRPC
ModelStreamInfer read with grpc.aio (what the OpenAI frontend does today, client/aio.py) against
Triton's HTTP generate_stream read with aiohttp (one server-sent event per response).

Starts a tritonserver on the tensorrtllm layout (the CI stand-in for the C++ backend, one response
per token) with the null engine (LLMSERVE_NULL_STEP_MS), then runs the same closed-loop load over
each transport in turn, alternating, and reports the client's and tritonserver's (with its stubs)
CPU time per streamed token. Only the client's share differs by transport; it is the frontend's
per-token cost that docs/perf-gpu.md found to be the wall on this layout.

    python tools/bench_token_transport.py [--concurrency 8] [--requests 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc
from tritonclient.grpc import service_pb2_grpc

from llmserve.bench.cpu import tree_cpu_seconds
from llmserve.bench.soak import start_server
from llmserve.client.wire import is_final, read_tokens, token_request
from llmserve.engine.null_model import NULL_STEP_ENV
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

MODEL = "tensorrt_llm_cpp"


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


async def http_stream(session: aiohttp.ClientSession, url: str, req: dict) -> int:
    n = 0
    async with session.post(f"http://{url}/v2/models/{MODEL}/generate_stream", json=req) as r:
        r.raise_for_status()
        async for line in r.content:
            if line.startswith(b"data: "):
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(event["error"])
                ids = event.get("output_ids")
                n += len(ids) if isinstance(ids, list) else 1
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
    wall = time.monotonic() - t0
    result = {
        "transport": transport,
        "tokens": tokens,
        "tok_per_s": round(tokens / wall),
        "client_us_per_token": round((own_cpu() - c0) / tokens * 1e6, 1),
        "server_us_per_token": round((tree_cpu_seconds(server_pid) - s0) / tokens * 1e6, 1),
    }
    await session.close()
    await channel.close()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=str(ROOT / "specs/tiny-trtllm.yaml"))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=10, help="per stream and round")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the two transports")
    ap.add_argument("--step-ms", type=float, default=1.0, help="the null engine's step time")
    args = ap.parse_args()
    os.environ[NULL_STEP_ENV] = str(args.step_ms)
    spec_path = Path(args.spec).resolve()
    spec = load_spec(spec_path)
    work = Path(tempfile.mkdtemp(prefix="token-transport-"))
    repo = work / "model_repository"
    write_repository(spec, spec_path.name, repo, standin=spec.engine.kind == "tensorrtllm")
    print(f"starting tritonserver on {repo} ...", file=sys.stderr, flush=True)
    server = start_server(spec_path, work, repository=repo)
    try:
        http_url, grpc_url = f"localhost:{server.http_port}", f"localhost:{server.grpc_port}"
        for _ in range(args.rounds):
            for transport in ("grpc", "http"):
                print(json.dumps(asyncio.run(run(transport, http_url, grpc_url, server.proc.pid, args))), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
