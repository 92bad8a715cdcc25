"""Small helpers over the real clients (requests for HTTP generate/SSE, tritonclient for gRPC)."""

from __future__ import annotations

import json
import queue

import requests
import tritonclient.grpc as grpcclient

from llmserve.client import wire


def generate(server, body: dict, model: str = "ensemble", timeout: float = 120) -> requests.Response:
    return requests.post(f"http://{server.http}/v2/models/{model}/generate", json=body, timeout=timeout)


def generate_stream(server, body: dict, model: str = "ensemble", timeout: float = 120) -> list[dict]:
    """All SSE events of one generate_stream call, parsed."""
    with requests.post(
        f"http://{server.http}/v2/models/{model}/generate_stream",
        json={**body, "stream": True},
        stream=True,
        timeout=timeout,
    ) as r:
        r.raise_for_status()
        return [json.loads(line[len(b"data: ") :]) for line in r.iter_lines() if line.startswith(b"data: ")]


def grpc_inputs(prompt: str, max_tokens: int, **extra) -> list:
    return wire.infer_inputs(wire.ensemble_body(prompt, max_tokens, **extra))


def grpc_stream(server, prompt: str, max_tokens: int, timeout: float = 120, **extra) -> list[str]:
    """Text pieces of one streamed gRPC request, in order."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "ensemble", grpc_inputs(prompt, max_tokens, stream=True, **extra), enable_empty_final_response=True
        )
        pieces = []
        while True:
            result, error = results.get(timeout=timeout)
            if error is not None:
                raise error
            response = result.get_response()
            if response.outputs:
                pieces.append(result.as_numpy("text_output").reshape(-1)[0].decode())
            if (
                response.parameters.get("triton_final_response")
                and response.parameters["triton_final_response"].bool_param
            ):
                return pieces
    finally:
        client.stop_stream()
        client.close()
