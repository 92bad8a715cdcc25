#!/usr/bin/env python3
"""End-to-end per-token cost of the tensorrtllm layout's relay, on a real tritonserver.

Starts the tiny random Llama twice, with room for long outputs: the torch layout (the engine sends
output_context_ids itself) and the tensorrtllm layout with the CI stand-in behind the relay (one
response per token from the "backend", the relay in between). Streams `--tokens` tokens over gRPC
(min_tokens = max_tokens, so the count is exact) and reports the median time between streamed
chunks and the whole request time per token, for each layout. The difference is what the relay
hop costs per token on this machine (the stand-in's engine is the same torch engine).

    python tools/bench_relay.py [--tokens 10 4000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.tritonserver import TritonProcess, free_ports
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec


def _spec(path: str, max_output: int):
    spec = load_spec(ROOT / path)
    # Short prompts, long outputs: prompt + output must fit the tiny model's 4096 positions.
    engine = spec.engine.model_copy(update={"max_input_len": 64, "max_output_len": max_output})
    return spec.model_copy(update={"engine": engine})


def _stream(grpc_url: str, tokens: int) -> tuple[float, list[float]]:
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    client.start_stream(callback=lambda result, error: results.put((time.perf_counter(), result, error)))
    inputs = []
    for name, arr, dtype in (
        ("text_input", np.array([[b"Tell me a long story."]], dtype=np.object_), "BYTES"),
        ("max_tokens", np.array([[tokens]], dtype=np.int32), "INT32"),
        ("min_tokens", np.array([[tokens]], dtype=np.int32), "INT32"),
        ("stream", np.array([[True]], dtype=np.bool_), "BOOL"),
    ):
        t = grpcclient.InferInput(name, list(arr.shape), dtype)
        t.set_data_from_numpy(arr)
        inputs.append(t)
    start = time.perf_counter()
    client.async_stream_infer("ensemble", inputs, enable_empty_final_response=True)
    stamps = []
    try:
        while True:
            at, result, error = results.get(timeout=600)
            if error is not None:
                raise error
            resp = result.get_response()
            if resp.outputs:
                stamps.append(at)
            if resp.parameters["triton_final_response"].bool_param:
                return at - start, [b - a for a, b in zip(stamps, stamps[1:])]
    finally:
        client.stop_stream()
        client.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[10, 4000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    for label, path, standin in (
        ("torch layout", "specs/tiny.yaml", False),
        ("tensorrtllm layout (stand-in)", "specs/tiny-trtllm.yaml", True),
    ):
        spec = _spec(path, max(args.tokens))
        build_checkpoint(spec)
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp) / "model_repository"
            write_repository(spec, path, repo, standin=standin)
            http, grpc, metrics = free_ports(3)
            proc = TritonProcess(
                repo,
                http_port=http,
                grpc_port=grpc,
                metrics_port=metrics,
                exit_timeout_s=5,
                log_path=Path(tmp) / "server.log",
                admin_key="bench",
            )
            proc.start()
            try:
                try:
                    proc.wait_ready(timeout_s=300)
                except RuntimeError:
                    print((Path(tmp) / "server.log").read_text()[-3000:], file=sys.stderr)
                    raise
                _stream(f"localhost:{grpc}", 4)  # warm-up
                for n in args.tokens:
                    totals, gaps = [], []
                    for _ in range(args.repeat):
                        total, g = _stream(f"localhost:{grpc}", n)
                        totals.append(total / n)
                        gaps.extend(g)
                    rows.append(
                        (
                            label,
                            n,
                            statistics.median(totals) * 1e3,
                            statistics.median(gaps) * 1e3 if gaps else float("nan"),
                        )
                    )
            finally:
                proc.stop()
    print(f"{'layout':32s} {'tokens':>7s} {'request ms/token':>17s} {'median chunk gap ms':>20s}")
    for label, n, per_token, gap in rows:
        print(f"{label:32s} {n:7d} {per_token:17.2f} {gap:20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
