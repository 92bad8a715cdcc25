"""The failover policy both ensemble clients follow (llmserve/client/retry.py): which failures are
retried, where the next attempt goes, the back-off, the attempt budget and the resume decision."""

from __future__ import annotations

import pytest

from llmserve.client.retry import (
    GRPC_RETRY,
    Attempts,
    Backoff,
    GaveUp,
    GenerationError,
    Picker,
    Server,
    Stats,
    StreamBroken,
    TokenAttempts,
    grpc_error,
    http_error,
    in_band_error,
    resume_request,
)
from llmserve.errors import ErrorKind

REQUEST = {"text_input": "<user>hi</user>", "max_tokens": 10, "min_tokens": 4, "apply_chat_template": True}
NO_WAIT = Backoff(0.0, 0.0, max_attempts=3)


def attempts(request=REQUEST, servers=2, backoff=NO_WAIT, seen=lambda: "SEEN:") -> Attempts:
    return Attempts(request, backoff, Stats(), servers, seen)


# --- what is retried ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "message, kind, retryable",
    [
        ("invalid max_tokens: must be at least 1", ErrorKind.INVALID_ARGUMENT, False),
        ("in ensemble 'ensemble', timeout: request exceeded serving.request_timeout_s", ErrorKind.TIMEOUT, False),
        ("server busy: 64 requests waiting", ErrorKind.BUSY, True),
        ("Exceeds maximum queue size", ErrorKind.BUSY, True),
        ("engine unavailable: shutting down", ErrorKind.UNAVAILABLE, True),
        ("Stub process 'tensorrt_llm_0_0' is not healthy.", ErrorKind.UNAVAILABLE, True),
        ("something else broke", ErrorKind.INTERNAL, True),
    ],
)
def test_in_band_errors_are_classified_by_message(message, kind, retryable):
    e = in_band_error(message)
    assert (e.kind, e.retryable, str(e)) == (kind, retryable, message)


def test_grpc_statuses():
    assert not grpc_error("StatusCode.INVALID_ARGUMENT", "bad").retryable
    assert grpc_error("StatusCode.INVALID_ARGUMENT", "bad").kind is ErrorKind.INVALID_ARGUMENT
    for status in GRPC_RETRY:
        assert grpc_error(status, "x").retryable, status
    assert grpc_error("StatusCode.RESOURCE_EXHAUSTED", "x").kind is ErrorKind.BUSY
    assert grpc_error("StatusCode.UNAVAILABLE", "x").kind is ErrorKind.UNAVAILABLE
    other = grpc_error("StatusCode.PERMISSION_DENIED", "x")
    assert (other.retryable, other.kind, other.status) == (False, ErrorKind.INTERNAL, "StatusCode.PERMISSION_DENIED")


def test_http_statuses():
    assert http_error(503, "HTTP 503: no server available").retryable
    assert http_error(429, "HTTP 429: slow down").retryable
    assert not http_error(400, "HTTP 400: invalid max_tokens: too large").retryable
    assert http_error(400, "HTTP 400: invalid max_tokens: too large").status == 400
    assert http_error(400, "HTTP 400: in ensemble: server busy: queue full").retryable  # generate answers 400
    assert not http_error(503, "HTTP 503: timeout: request exceeded serving.request_timeout_s").retryable
    assert not http_error(501, "HTTP 501: not implemented").retryable


# --- where the next attempt goes ------------------------------------------------------------------
def test_pick_rotates_over_equal_servers():
    servers = [Server("a"), Server("b"), Server("c")]
    p = Picker(start=0)
    assert [p.pick(servers).url for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]


def test_pick_prefers_healthy_untried_least_busy():
    a, b, c = Server("a", inflight=3), Server("b", inflight=1), Server("c", inflight=2)
    p = Picker(start=0)
    assert p.pick([a, b, c]).url == "b"
    b.healthy = False
    assert {p.pick([a, b, c]).url for _ in range(5)} == {"c"}
    assert p.pick([a, b, c], avoid={"c"}).url == "a"
    assert p.pick([a, b, c], avoid={"a", "c"}).url == "b"  # unhealthy, but the only one not tried
    assert p.pick([a, b, c], avoid={"a", "b", "c"}).url == "b"  # all tried: any, least busy
    with pytest.raises(ValueError):
        p.pick([])


def test_random_start_spreads_clients():
    servers = [Server(str(i)) for i in range(4)]
    firsts = {Picker().pick(servers).url for _ in range(200)}
    assert len(firsts) > 1


# --- back-off ------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_the_cap_with_jitter():
    b = Backoff(0.1, 1.0, max_attempts=6)
    for failures, full in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)):
        for _ in range(20):
            assert full * 0.5 <= b.delay(failures) <= full


def test_max_attempts_defaults_to_the_spec():
    from llmserve.spec.openai import OpenAIFrontend

    assert Backoff(0.1, 1.0).max_attempts == OpenAIFrontend().max_attempts


# --- one request across attempts ------------------------------------------------------------------
def test_retries_before_any_token_resend_the_request_elsewhere():
    a = attempts()
    a.begin("a")
    assert a.body() is REQUEST
    assert a.failed("a", GenerationError("refused", retryable=True)) == 0.0
    assert a.tried == {"a"} and a.body() is REQUEST
    assert (a.stats.attempts, a.stats.retries, a.stats.resumes, a.stats.errors) == (1, 1, 0, ["a: refused"])


def test_after_tokens_the_stream_resumes_with_the_text_so_far():
    calls = []
    a = attempts(seen=lambda: calls.append(1) or "SEEN:")
    a.begin("a")
    a.received("Hel", 2)
    a.received("", 1)  # a token that completes no character yet
    a.received("lo", 1)
    assert a.failed("a", StreamBroken("cut")) == 0.0
    body = a.body()
    assert body == {
        **REQUEST,
        "text_input": "SEEN:Hello",
        "apply_chat_template": False,
        "max_tokens": 6,
        "min_tokens": 0,
    }
    assert body == resume_request(REQUEST, "SEEN:", "Hello", 4)
    a.begin("b")
    a.received(" world", 1)
    a.failed("b", StreamBroken("cut again"))
    assert a.body()["text_input"] == "SEEN:Hello world" and a.body()["max_tokens"] == 5
    assert calls == [1]  # the prompt as the model saw it is rendered once
    assert (a.stats.resumes, a.stats.retries, a.stats.tokens, a.text) == (2, 0, 5, "Hello world")


def test_a_cut_after_the_last_token_is_no_failure():
    a = attempts()
    a.begin("a")
    a.received("x" * 10, 10)
    assert a.failed("a", StreamBroken("cut")) is None
    assert (a.stats.resumes, a.stats.retries) == (0, 0)


TOKEN_REQUEST = {"input_ids": [5, 6], "input_lengths": 2, "request_output_len": 10, "min_tokens": 4, "streaming": True}


def test_a_token_level_stream_resumes_from_every_token_the_engine_sent():
    generated: list[int] = []
    a = TokenAttempts(TOKEN_REQUEST, NO_WAIT, Stats(), 2, generated)
    a.begin("a")
    assert a.body() == TOKEN_REQUEST
    generated.extend([7, 8, 9])  # three tokens in, one of them held back from the caller (a stop string may follow)
    a.received("ab", 2)
    assert a.failed("a", StreamBroken("cut")) == 0.0
    assert a.body() == {
        **TOKEN_REQUEST,
        "input_ids": [5, 6, 7, 8, 9],
        "input_lengths": 5,
        "request_output_len": 7,
        "min_tokens": 1,
    }
    assert (a.stats.resumes, a.stats.retries) == (1, 0)
    generated.extend(range(7))  # the budget is spent: a cut after the last token is no failure
    assert a.failed("b", StreamBroken("cut")) is None


def test_errors_that_are_not_retryable_are_raised_at_once():
    a = attempts()
    a.begin("a")
    e = GenerationError("invalid max_tokens: no", kind=ErrorKind.INVALID_ARGUMENT, status=400)
    with pytest.raises(GenerationError) as raised:
        a.failed("a", e)
    assert raised.value is e and a.stats.errors == [] and a.stats.retries == 0


@pytest.mark.parametrize(
    "last, kind", [(in_band_error("server busy: full"), ErrorKind.BUSY), (StreamBroken("cut"), ErrorKind.UNAVAILABLE)]
)
def test_the_budget_counts_every_send(last, kind):
    a = attempts(backoff=Backoff(0.0, 0.0, max_attempts=3))
    for url in ("a", "b"):
        a.begin(url)
        assert a.failed(url, GenerationError("refused", retryable=True)) is not None
    a.begin("a")
    with pytest.raises(GaveUp) as gave_up:
        a.failed("a", last)
    g = gave_up.value
    assert (g.attempts, g.kind, g.retryable, g.last) == (3, kind, True, f"a: {last}")
    assert str(g) == f"gave up after 3 failed attempts: a: {last}"
    assert a.stats.attempts == 3 and a.stats.retries == 3


def test_tried_servers_are_forgotten_once_all_failed():
    a = attempts(servers=2, backoff=Backoff(0.0, 0.0, max_attempts=6))
    for url, tried in (("a", {"a"}), ("b", set()), ("a", {"a"})):
        a.begin(url)
        a.failed(url, GenerationError("refused", retryable=True))
        assert a.tried == tried
