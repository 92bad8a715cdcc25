"""The sync failover client's bookkeeping (llmserve/client/failover.py: Generation and generate) over a
scripted transport: pieces, stats, retries before the first token, resumes after it, the budget."""

from __future__ import annotations

import pytest

from llmserve.client.failover import FailoverClient, GaveUp, GenerationError, Stats, StreamBroken
from llmserve.client.retry import in_band_error
from llmserve.client.wire import Piece
from llmserve.errors import ErrorKind


class ScriptedTransport:
    """Each call takes the next script: a list of Pieces, then optionally an exception to raise."""

    def __init__(self, *scripts):
        self.scripts = list(scripts)
        self.calls: list[tuple[str, dict]] = []

    def stream(self, endpoint: str, body: dict):
        self.calls.append((endpoint, body))
        *pieces, end = self.scripts.pop(0)
        yield from pieces
        if end is not None:
            raise end

    def generate(self, endpoint: str, body: dict) -> str:
        return "".join(p.text for p in self.stream(endpoint, body))


def client(*scripts, endpoints=("a", "b", "c"), **kw) -> FailoverClient:
    c = FailoverClient(list(endpoints), backoff_s=0.0, max_backoff_s=0.0, start=0, **kw)
    c.transport = ScriptedTransport(*scripts)
    return c


def test_an_uninterrupted_stream():
    c = client([Piece("Hello", 1), Piece("", 1), Piece(" world", 2), None])
    gen = c.stream("hi", 8, temperature=0.5)
    assert list(gen) == ["Hello", " world"] and gen.text == "Hello world"
    assert (gen.stats.attempts, gen.stats.retries, gen.stats.resumes, gen.stats.tokens) == (1, 0, 0, 4)
    assert c.transport.calls == [("a", {"text_input": "hi", "max_tokens": 8, "temperature": 0.5})]
    assert gen.endpoint == "a"


def test_a_failure_before_the_first_token_is_retried_on_another_server():
    c = client([GenerationError("refused", retryable=True)], [Piece("ok", 1), None])
    gen = c.stream("hi", 8)
    assert list(gen) == ["ok"]
    assert [e for e, _ in c.transport.calls] == ["a", "b"]
    assert c.transport.calls[0][1] == c.transport.calls[1][1]  # the same request again
    assert (gen.stats.attempts, gen.stats.retries, gen.stats.resumes) == (2, 1, 0)
    assert gen.stats.endpoints == ["a", "b"] and gen.stats.errors == ["a: refused"]


def test_a_broken_stream_resumes_with_the_text_so_far():
    c = client([Piece("Hel", 1), Piece("lo", 1), StreamBroken("cut")], [Piece(" world", 1), None])
    gen = c.stream("Say hello", 5, apply_chat_template=False, min_tokens=3)
    assert list(gen) == ["Hel", "lo", " world"]
    (_, first), (second_endpoint, resumed) = c.transport.calls
    assert second_endpoint == "b"
    assert resumed == {
        **first,
        "text_input": "Say helloHello",
        "max_tokens": 3,
        "min_tokens": 1,
        "apply_chat_template": False,
    }
    assert (gen.stats.resumes, gen.stats.retries, gen.stats.tokens) == (1, 0, 3)


def test_resuming_a_chat_stream_needs_the_tokenizer():
    c = client([Piece("Hel", 1), StreamBroken("cut")])
    with pytest.raises(GenerationError, match="tokenizer_dir"):
        list(c.stream("Say hello", 5))


def test_a_chat_stream_resumes_from_the_rendered_template(smollm2_dir):
    c = client([Piece("Hi", 1), StreamBroken("cut")], [Piece("!", 1), None], tokenizer_dir=str(smollm2_dir))
    gen = c.stream("Say hello", 5)
    assert list(gen) == ["Hi", "!"]
    resumed = c.transport.calls[1][1]["text_input"]
    assert resumed.endswith("<|im_start|>assistant\nHi") and "Say hello" in resumed


def test_a_cut_after_the_last_token_ends_the_stream_normally():
    c = client([Piece("a", 1), Piece("b", 1), StreamBroken("cut")])
    gen = c.stream("x", 2, apply_chat_template=False)
    assert list(gen) == ["a", "b"] and len(c.transport.calls) == 1 and gen.stats.resumes == 0


def test_a_request_error_is_not_retried():
    c = client([in_band_error("invalid max_tokens: 100000 exceeds 4096")])
    gen = c.stream("x", 100000)
    with pytest.raises(GenerationError) as e:
        list(gen)
    assert e.value.kind is ErrorKind.INVALID_ARGUMENT and gen.stats.attempts == 1


def test_the_stream_gives_up_after_max_attempts():
    c = client(*([GenerationError("refused", retryable=True)],) * 3, max_attempts=3)
    gen = c.stream("x", 4)
    with pytest.raises(GaveUp) as e:
        list(gen)
    assert e.value.attempts == 3 and e.value.retryable
    assert [u for u, _ in c.transport.calls] == ["a", "b", "c"]  # every server once


def test_generate_retries_and_counts_into_the_callers_stats():
    c = client(
        [GenerationError("HTTP 503: no server", status=503, retryable=True)],
        [Piece("whole answer", 3), None],
        endpoints=("a", "b"),
    )
    st = Stats()
    assert c.generate("hi", 8, stats=st) == "whole answer"
    assert (st.attempts, st.retries, st.endpoints) == (2, 1, ["a", "b"])
    assert st.errors == ["a: HTTP 503: no server"]


def test_generate_keeps_the_status_of_a_client_error():
    c = client([GenerationError("HTTP 400: invalid max_tokens: no", status=400)])
    st = Stats()
    with pytest.raises(GenerationError) as e:
        c.generate("hi", 100000, stats=st)
    assert e.value.status == 400 and st.attempts == 1 and st.retries == 0


def test_generate_gives_up_with_the_last_status():
    c = client(*([GenerationError("HTTP 503: down", status=503, retryable=True)],) * 2, max_attempts=2)
    with pytest.raises(GaveUp) as e:
        c.generate("hi", 4)
    assert e.value.status == 503 and e.value.kind is ErrorKind.UNAVAILABLE


def test_bad_arguments():
    with pytest.raises(ValueError):
        FailoverClient([])
    with pytest.raises(ValueError):
        FailoverClient(["a"], protocol="smtp")
    assert FailoverClient("a:1").endpoints == ["a:1"]


def test_grpc_streams_that_got_their_final_response_are_closed_not_cancelled():
    """The gRPC transport ends a finished stream by closing its side (a cancel then can leak in Triton
    2.51 and hold the ensemble loaded until SIGTERM's exit timeout: docs/cancellation.md section 4), and
    cancels a stream its caller gave up on, so that Triton stops that generation."""
    import time

    from llmserve.client.failover import GRPCTransport
    from llmserve.contract import ENSEMBLE

    from .grpc_servers import Answering, Pieces, served

    answering, stalled = Answering(), Pieces(1, stall=True, text=True)
    (server_a, url_a), (server_s, url_s) = served(answering), served(stalled)
    transport = GRPCTransport(ENSEMBLE, timeout_s=30)
    body = {"text_input": "hi", "max_tokens": 4}
    try:
        assert list(transport.stream(url_a, body)) == []
        given_up = transport.stream(url_s, body)
        next(given_up)  # the one piece, then the caller stops reading
        given_up.close()
        deadline = time.monotonic() + 30  # each server records the end after the client's side saw it
        while (not answering.ends or not stalled.cancelled) and time.monotonic() < deadline:
            time.sleep(0.01)
        cancelled = stalled.cancelled  # before the servers stop (a stop ends the stream too)
    finally:
        server_a.stop(grace=None)
        server_s.stop(grace=None)
    assert answering.ends == [(ENSEMBLE, "half-closed")]
    assert cancelled
