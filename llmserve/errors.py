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


# Messages of a request refused or cut for want of capacity, as they come back over BLS (which
# turns every error into INTERNAL): the engine's full queue, Triton's own, an engine that cannot
# serve, a dead stub, serving.request_timeout_s. The unary twins answer them UNAVAILABLE (HTTP 503),
# the status clients and load balancers retry.
_UNAVAILABLE = re.compile(r"server busy|Exceeds maximum queue size|engine unavailable|is not healthy|\btimeout: ")


def is_unavailable(message: str) -> bool:
    return bool(_UNAVAILABLE.search(message))
