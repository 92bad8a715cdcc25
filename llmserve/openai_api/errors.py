"""Errors in OpenAI's format: `{"error": {"message", "type", "param", "code"}}` with the HTTP status
OpenAI uses, so the `openai` SDK raises the matching exception (BadRequestError, AuthenticationError,
NotFoundError, RateLimitError, InternalServerError, ...)."""

from __future__ import annotations

from ..client.retry import GaveUp, GenerationError
from ..errors import ErrorKind

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "internal_error",
    502: "api_error",
    503: "service_unavailable",
    504: "timeout",
}


class APIError(Exception):
    """An answer that is not a completion. `param` names the request field at fault (OpenAI's
    convention: `messages[0].role`, `max_tokens`); `retry_after_s` becomes a Retry-After header."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.retry_after_s = retry_after_s

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "api_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}


def bad_request(param: str | None, message: str, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def unsupported(param: str, why: str = "") -> APIError:
    return APIError(
        400,
        f"`{param}` is not supported by this server" + (f": {why}" if why else ""),
        param=param,
        code="unsupported_parameter",
    )


def busy(message: str) -> APIError:
    return APIError(503, message, code="server_busy", retry_after_s=1)


def from_client_error(e: GenerationError) -> APIError:
    """The answer for a failure the ensemble client could not absorb: the request's fault 400, the
    engine's request timeout 504, every attempt failed 503 with Retry-After (server_busy when the last
    server was busy, else unavailable), anything else 502."""
    if isinstance(e, GaveUp):
        if e.kind is ErrorKind.BUSY:
            return busy(f"every Triton server is busy; retry later ({e.last})")
        return APIError(
            503,
            f"no Triton server could serve the request after {e.attempts} attempts: {e.last}",
            code="unavailable",
            retry_after_s=1,
        )
    if e.kind is ErrorKind.INVALID_ARGUMENT:
        return APIError(400, str(e), code="invalid_request")
    if e.kind is ErrorKind.TIMEOUT:
        return APIError(504, str(e), code="timeout")
    return APIError(502, str(e))
