"""Helpers the model.py adapters share. The Triton utils module is passed in (`pb`), so the
package itself never imports triton_python_backend_utils."""

from __future__ import annotations

import json

import numpy as np

from ..errors import EngineBusy, EngineUnavailable, RequestError
from ..finish import FinishReason


def parameters(args: dict) -> dict[str, str]:
    cfg = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}


def reader(pb, request):
    def read(name: str):
        t = pb.get_input_tensor_by_name(request, name)
        return None if t is None else t.as_numpy()

    return read


def tensors(pb, outputs: dict[str, np.ndarray], wanted: "set[str] | None" = None) -> list:
    """Output tensors; with `wanted` (the request's requested_output_names()), only those.

    A decoupled model must never hand `response_sender.send()` a tensor the client did not ask
    for. Triton 2.51's stub (python_backend r24.10, ResponseSender::Send) releases the GIL, then
    drops the unrequested tensors, and with them their numpy arrays, without the GIL. On a
    Python 3.12 stub that is a segfault at address 0x10 in libpython3.12 (3.12 frees objects
    through the thread state, which a thread without the GIL does not have); 3.11 happens to
    survive. Upstream fixed it in python_backend #390 (r24.12). Returned (non-decoupled)
    responses are pruned with the GIL held and are safe either way."""
    return [pb.Tensor(name, value) for name, value in outputs.items() if not wanted or name in wanted]


def failure_code(pb, failure: FinishReason):
    """How a request the engine could not finish is answered."""
    return {FinishReason.CANCELLED: pb.TritonError.CANCELLED,
            FinishReason.TIMEOUT: pb.TritonError.UNAVAILABLE}.get(failure, pb.TritonError.INTERNAL)


class StreamSender:
    """The responses of one decoupled request: `send(outputs or None, final, failure or None,
    message or None)`, callable from any thread (the engine's). Takes what it needs from the
    request now: a request is not read after execute() returns."""

    def __init__(self, pb, request):
        self.pb = pb
        self.sender = request.get_response_sender()
        self.wanted = set(request.requested_output_names())

    def __call__(self, outputs, final: bool, failure: FinishReason | None = None, message: str | None = None) -> None:
        pb = self.pb
        flags = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if failure is not None:
            self.sender.send(pb.InferenceResponse(error=pb.TritonError(message, failure_code(pb, failure))), flags=flags)
        elif outputs is None:
            self.sender.send(flags=flags)
        else:
            self.sender.send(pb.InferenceResponse(output_tensors=tensors(pb, outputs, self.wanted)), flags=flags)

    def fail(self, error: Exception) -> None:
        """The request is refused before it reaches the engine."""
        self.sender.send(error_response(self.pb, error), flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        return self.sender.is_cancelled()


def error_response(pb, error: Exception):
    """RequestError -> INVALID_ARG (HTTP 400 / gRPC INVALID_ARGUMENT); a full engine queue or an
    engine that cannot serve -> UNAVAILABLE (HTTP 503 / gRPC UNAVAILABLE: "server busy", "engine
    unavailable"; retry elsewhere); anything else -> INTERNAL."""
    code = (pb.TritonError.INVALID_ARG if isinstance(error, RequestError) else
            pb.TritonError.UNAVAILABLE if isinstance(error, (EngineBusy, EngineUnavailable)) else
            pb.TritonError.INTERNAL)
    return pb.InferenceResponse(error=pb.TritonError(str(error), code))
