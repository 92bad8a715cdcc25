"""Helpers the model.py adapters share. The Triton utils module is passed in (`pb`), so the
package itself never imports triton_python_backend_utils."""

from __future__ import annotations

import json

import numpy as np

from ..errors import EngineBusy, RequestError


def parameters(args: dict) -> dict[str, str]:
    cfg = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}


def reader(pb, request):
    def read(name: str):
        t = pb.get_input_tensor_by_name(request, name)
        return None if t is None else t.as_numpy()

    return read


def tensors(pb, outputs: dict[str, np.ndarray]) -> list:
    return [pb.Tensor(name, value) for name, value in outputs.items()]


def error_response(pb, error: Exception):
    """RequestError -> INVALID_ARG (HTTP 400 / gRPC INVALID_ARGUMENT); a full engine queue ->
    UNAVAILABLE (HTTP 503 / gRPC UNAVAILABLE, "server busy"); anything else -> INTERNAL."""
    code = (pb.TritonError.INVALID_ARG if isinstance(error, RequestError) else
            pb.TritonError.UNAVAILABLE if isinstance(error, EngineBusy) else pb.TritonError.INTERNAL)
    return pb.InferenceResponse(error=pb.TritonError(str(error), code))
