"""What the frontend answers for each failure the ensemble client could not absorb (openai_api/errors.py
from_client_error): the status codes, error types and Retry-After the OpenAI SDK sees."""

from __future__ import annotations

import pytest

from llmserve.client.retry import GaveUp, GenerationError, grpc_error, in_band_error
from llmserve.openai_api.errors import from_client_error


@pytest.mark.parametrize(
    "error, status, type_, code, retry_after",
    [
        (in_band_error("invalid max_tokens: too large"), 400, "invalid_request_error", "invalid_request", None),
        (grpc_error("StatusCode.INVALID_ARGUMENT", "bad input"), 400, "invalid_request_error", "invalid_request", None),
        (in_band_error("timeout: request exceeded serving.request_timeout_s"), 504, "timeout", "timeout", None),
        (
            GaveUp(6, "a:1: server busy: full", in_band_error("server busy: full")),
            503,
            "service_unavailable",
            "server_busy",
            1,
        ),
        (
            GaveUp(6, "a:1: StatusCode.UNAVAILABLE: gone", grpc_error("StatusCode.UNAVAILABLE", "gone")),
            503,
            "service_unavailable",
            "unavailable",
            1,
        ),
        (grpc_error("StatusCode.PERMISSION_DENIED", "no"), 502, "api_error", None, None),
    ],
)
def test_client_errors_become_openai_errors(error: GenerationError, status, type_, code, retry_after):
    api = from_client_error(error)
    body = api.body()["error"]
    assert (api.status, body["type"], body["code"], api.retry_after_s) == (status, type_, code, retry_after)


def test_messages_name_the_last_failure():
    busy = from_client_error(GaveUp(6, "a:1: server busy: full", in_band_error("server busy: full")))
    assert busy.message == "every Triton server is busy; retry later (a:1: server busy: full)"
    down = from_client_error(
        GaveUp(3, "b:1: StatusCode.UNAVAILABLE: gone", grpc_error("StatusCode.UNAVAILABLE", "gone"))
    )
    assert (
        down.message == "no Triton server could serve the request after 3 attempts: b:1: StatusCode.UNAVAILABLE: gone"
    )
