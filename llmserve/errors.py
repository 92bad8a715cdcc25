"""The error types our code raises, and THE classifier of error messages that come back across a hop.

Every user error names the request field at fault and becomes HTTP 400 / gRPC INVALID_ARGUMENT, never
an assert or a crash. What each kind means and the markers that carry it are in contract.py (the
error vocabulary); `classify` is the only code that reads a message to learn its kind: the unary
twins, the relay, the OpenAI frontend and the HAProxy renderer all go through it."""

from __future__ import annotations

import re

from .contract import BUSY_PREFIX, CANCELLED_MESSAGE, ERROR_MARKERS, UNAVAILABLE_PREFIX, ErrorKind

# RequestError messages read "invalid <field>: <problem>".
_INVALID = re.compile(r"\binvalid [A-Za-z_]+: ")


class RequestError(ValueError):
    def __init__(self, field: str, problem: str):
        super().__init__(f"invalid {field}: {problem}")
        self.field = field


class EngineBusy(RuntimeError):
    """The engine's waiting queue is full: the request is refused at once (HTTP 503 / gRPC
    UNAVAILABLE) instead of queueing forever. The message is "server busy: <detail>"."""

    def __init__(self, detail: str):
        super().__init__(f"{BUSY_PREFIX}: {detail}")


class EngineUnavailable(RuntimeError):
    """The engine cannot serve (it failed for good, or the server is shutting down): HTTP 503 /
    gRPC UNAVAILABLE, so clients and the load balancer try another server."""

    def __init__(self, detail: str):
        super().__init__(f"{UNAVAILABLE_PREFIX}: {detail}")


def classify(message: str) -> ErrorKind:
    """An error message from any hop (ours, Triton's, over BLS or the ensemble) -> its kind."""
    if _INVALID.search(message):
        return ErrorKind.INVALID_ARGUMENT
    for kind, markers in ERROR_MARKERS.items():  # busy, unavailable, timeout, Triton's input checks
        if any(m in message for m in markers):
            return kind
    if message.strip().endswith(CANCELLED_MESSAGE):
        return ErrorKind.CANCELLED
    return ErrorKind.INTERNAL


def kind_of(error: BaseException) -> ErrorKind:
    """The kind of an exception raised in this process (typed first, then by its message)."""
    if isinstance(error, RequestError):
        return ErrorKind.INVALID_ARGUMENT
    if isinstance(error, EngineBusy):
        return ErrorKind.BUSY
    if isinstance(error, EngineUnavailable):
        return ErrorKind.UNAVAILABLE
    return classify(str(error))


# Kind -> the name of Triton's error code (pb_utils.TritonError.<name>): 400 for the client's fault,
# 503 (the status clients and load balancers retry) for no room / cannot serve / out of time.
TRITON_CODE = {
    ErrorKind.INVALID_ARGUMENT: "INVALID_ARG",
    ErrorKind.BUSY: "UNAVAILABLE",
    ErrorKind.UNAVAILABLE: "UNAVAILABLE",
    ErrorKind.TIMEOUT: "UNAVAILABLE",
    ErrorKind.CANCELLED: "CANCELLED",
    ErrorKind.INTERNAL: "INTERNAL",
}


def triton_error(pb, message: str, kind: ErrorKind | None = None):
    """A pb_utils.TritonError for `message`, its code from its kind (classified when not given)."""
    kind = classify(message) if kind is None else kind
    return pb.TritonError(message, getattr(pb.TritonError, TRITON_CODE[kind]))


# Kinds a load balancer may retry on another server (before any response byte was sent): a timeout
# is not among them (it would double the wait), nor a client error.
RETRY_ELSEWHERE = (ErrorKind.BUSY, ErrorKind.UNAVAILABLE)


def retry_elsewhere_markers() -> tuple[str, ...]:
    """The message substrings that mean "another server may serve this" (HAProxy's retry rule)."""
    return tuple(m for kind in RETRY_ELSEWHERE for m in ERROR_MARKERS[kind])


def is_request_error(message: str) -> bool:
    """Transitional (the relay and the async client move to classify()); to be removed."""
    return classify(message) is ErrorKind.INVALID_ARGUMENT
