"""User errors. Every one names the request field at fault and becomes HTTP 400 /
gRPC INVALID_ARGUMENT in the model.py adapters; never an assert, never a crash."""

import re

# Messages read "invalid <field>: <problem>". BLS responses lose the error code on the way back
# (Triton 2.51 hands a BLS caller every error as INTERNAL), so the unary twins recognise user
# errors by this shape and restore INVALID_ARG.
_PATTERN = re.compile(r"\binvalid [A-Za-z_]+: ")


class RequestError(ValueError):
    def __init__(self, field: str, problem: str):
        super().__init__(f"invalid {field}: {problem}")
        self.field = field


def is_request_error(message: str) -> bool:
    return bool(_PATTERN.search(message))


class EngineBusy(RuntimeError):
    """The engine's waiting queue is full: the request is refused at once (HTTP 503 / gRPC
    UNAVAILABLE, "server busy") instead of queueing forever."""


class EngineUnavailable(RuntimeError):
    """The engine cannot serve (it failed for good, or the server is shutting down): HTTP 503 /
    gRPC UNAVAILABLE, so clients and the load balancer try another server."""
