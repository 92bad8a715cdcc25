"""The async ensemble client's loop (llmserve/client/aio.py: EnsembleClient.generate) with a scripted
transport in place of the gRPC attempt: it follows the same policy as the sync client."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmserve.client.aio import Drained, Endpoint, EnsembleClient, GenerationError, Piece, Route, Stats
from llmserve.client.retry import GaveUp, Server, StreamBroken, in_band_error
from llmserve.client.wire import is_final, token_request
from llmserve.contract import ENGINE, ENSEMBLE
from llmserve.deploy.frontend import set_drained
from llmserve.errors import ErrorKind

from .grpc_servers import Answering, Pieces, served

REQUEST = {"text_input": "<prompt>", "max_tokens": 6, "stream": True, "apply_chat_template": False}


class Scripted(EnsembleClient):
    def __init__(self, *scripts, max_attempts=6):
        super().__init__(["a:1", "b:1"], idle_timeout_s=5, max_attempts=max_attempts, health_interval_s=0.5)
        self.endpoints = [Server(u) for u in self.urls]  # no channels: _attempt is scripted
        self.backoff = type(self.backoff)(0.0, 0.0, max_attempts)
        self.scripts = list(scripts)
        self.calls: list[tuple[str, dict, str]] = []

    async def _attempt(self, ep, body, request_id, stats, route=None):
        self.calls.append((ep.url, body, request_id))
        *pieces, end = self.scripts.pop(0)
        for p in pieces:
            yield p
        if end is not None:
            raise end


def run(client: Scripted, stats: Stats) -> list[Piece]:
    async def go():
        return [p async for p in client.generate(REQUEST, "cmpl-1", stats)]

    return asyncio.run(go())


def test_retry_then_resume_on_the_other_server():
    c = Scripted(
        [in_band_error("server busy: full")],
        [Piece("Hel", 1), Piece("lo", 2), StreamBroken("cut")],
        [Piece("!", 1), None],
    )
    st = Stats()
    assert "".join(p.text for p in run(c, st)) == "Hello!"
    (u1, b1, id1), (u2, b2, id2), (u3, b3, id3) = c.calls
    assert u1 != u2 and u2 != u3  # each attempt on the server that did not just fail
    assert b1 is REQUEST and b2 is REQUEST
    assert b3 == {**REQUEST, "text_input": "<prompt>Hello", "max_tokens": 3}
    assert (id1, id2, id3) == ("cmpl-1-1", "cmpl-1-2", "cmpl-1-3")  # one id per attempt (stop requests target it)
    assert (st.attempts, st.retries, st.resumes, st.tokens) == (3, 1, 1, 4)
    assert st.errors[0].endswith(": server busy: full")


def test_request_errors_and_timeouts_are_not_retried():
    for message, kind in (
        ("invalid temperature: -1", ErrorKind.INVALID_ARGUMENT),
        ("timeout: request exceeded serving.request_timeout_s", ErrorKind.TIMEOUT),
    ):
        c = Scripted([in_band_error(message)])
        with pytest.raises(GenerationError) as e:
            run(c, Stats())
        assert e.value.kind is kind and not e.value.retryable and len(c.calls) == 1


@pytest.mark.parametrize(
    "last, kind",
    [
        (in_band_error("server busy: full"), ErrorKind.BUSY),
        (GenerationError("StatusCode.UNAVAILABLE: gone", retryable=True), ErrorKind.UNAVAILABLE),
    ],
)
def test_gives_up_busy_or_unavailable(last, kind):
    c = Scripted([StreamBroken("cut")], [last], max_attempts=2)
    with pytest.raises(GaveUp) as e:
        run(c, Stats())
    assert e.value.kind is kind and e.value.attempts == 2 and e.value.last.endswith(str(last))


def test_close_waits_for_the_stops_of_abandoned_streams(caplog):
    """A stop sent for an abandoned stream is finished before the channels close (a stop cut short
    leaves its generation running), within close()'s bound; one that outlives it is logged."""
    done = []

    async def stop(delay: float) -> None:
        await asyncio.sleep(delay)
        done.append(delay)

    async def go(delay: float, drain_s: float) -> None:
        client = EnsembleClient(["127.0.0.1:1"], idle_timeout_s=1, max_attempts=1, health_interval_s=1)
        client._spawn(stop(delay))
        await client.close(drain_s=drain_s)

    asyncio.run(go(0.05, drain_s=5))
    assert done == [0.05]
    asyncio.run(go(5, drain_s=0.05))
    assert done == [0.05]
    assert "1 stop(s) still unanswered" in caplog.text


class Probed(Server):
    """An endpoint whose readiness probe is counted (Endpoint.check without a channel)."""

    def __init__(self, url):
        super().__init__(url)
        self.checks = 0

    async def check(self, timeout_s):
        self.checks += 1
        self.healthy = True
        return True


def test_a_drained_endpoint_is_not_ready_and_not_asked(tmp_path):
    drained = tmp_path / "openai-drained.txt"
    c = EnsembleClient(["a:1", "b:1"], idle_timeout_s=5, max_attempts=6, health_interval_s=0.5, drained_file=drained)
    c.endpoints = [Probed(u) for u in c.urls]
    asyncio.run(c._check_all(1.0))  # no file yet: nothing drained
    assert [e.healthy for e in c.endpoints] == [True, True]
    drained.write_text("b:1\n")
    asyncio.run(c._check_all(1.0))
    assert [e.healthy for e in c.endpoints] == [True, False] and [e.checks for e in c.endpoints] == [2, 1]
    assert c.picker.pick(c.endpoints).url == "a:1"  # new requests go elsewhere
    drained.write_text("")
    asyncio.run(c._check_all(1.0))
    assert [e.healthy for e in c.endpoints] == [True, True]


def test_a_drain_is_seen_by_the_next_request_without_waiting_for_a_poll(tmp_path):
    # The rolling restart stops a server soon after listing it: a request picked before the next
    # health poll must not go there (no poll runs in this test at all).
    drained = tmp_path / "openai-drained.txt"
    c = Scripted(*[[Piece("x", 1), None]] * 8)
    c.drained = Drained(drained)
    for _ in range(2):
        run(c, Stats())
    assert {u for u, _, _ in c.calls} == {"a:1", "b:1"}  # both in use (the rotation alternates)
    set_drained(drained, "b:1", True)
    for _ in range(4):
        run(c, Stats())
    assert [u for u, _, _ in c.calls[2:]] == ["a:1"] * 4
    set_drained(drained, "b:1", False)
    assert c.drained.urls() == set()  # undrained: the next poll may find it ready again


def test_a_drained_server_is_not_picked_even_when_no_other_is_known_ready(tmp_path):
    # The rolling restart drains the second server while the first, just back, is not seen ready yet
    # (its poll came late): the picker's fallback to servers not known ready must skip the drained one.
    drained = tmp_path / "openai-drained.txt"
    c = Scripted(*[[Piece("x", 1), None]] * 4)
    c.drained = Drained(drained)
    set_drained(drained, "b:1", True)
    c.endpoints[0].healthy = False  # a:1 restarted; no poll has seen it ready again
    for _ in range(4):
        run(c, Stats())
    assert [u for u, _, _ in c.calls] == ["a:1"] * 4


def test_answered_streams_are_closed_not_cancelled():
    """A stream whose final response was read (a finished generation, an answered stop) is ended by
    closing our side, never cancelled: Triton 2.51 leaks a stream cancelled in the moment its final
    response left the model, and that model then holds tritonserver's exit (docs/cancellation.md)."""
    model = Answering()
    server, url = served(model)

    async def go():
        client = EnsembleClient([url], idle_timeout_s=30, max_attempts=1, health_interval_s=1)
        client.endpoints = [ep] = [Endpoint(url)]
        await client._stop(ep, "cmpl-1-1")
        assert [p async for p in client._attempt(ep, REQUEST, "cmpl-2-1", Stats())] == []
        await client.close()

    try:
        asyncio.run(go())
        deadline = time.monotonic() + 30  # the server records an end after the client saw it
        while len(model.ends) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.stop(grace=None)
    assert sorted(model.ends) == [(ENSEMBLE, "half-closed"), (ENGINE, "half-closed")]


def _read_all(url: str, idle_s: float, hold_s: float) -> list:
    """Read one stream with idle timeout idle_s, holding each piece hold_s before reading on."""

    async def go():
        client = EnsembleClient([url], idle_timeout_s=idle_s, max_attempts=1, health_interval_s=1)
        client.endpoints = [ep] = [Endpoint(url)]
        got = []
        route = Route(
            lambda body, rid, _: token_request(body, rid, ENGINE),
            lambda r: None if is_final(r) else Piece("x", 1),
            ENGINE,
            bool,
        )
        try:
            async for p in client._attempt(ep, {"input_ids": [1, 2]}, "cmpl-1-1", Stats(), route):
                got.append(p)
                await asyncio.sleep(hold_s)
        finally:
            await client.close(drain_s=0)
        return got

    return asyncio.run(asyncio.wait_for(go(), 120))  # (a hang fails here rather than stalling the suite)


def test_a_stream_silent_for_the_idle_timeout_is_given_up_and_cancelled():
    model = Pieces(1, stall=True)
    server, url = served(model)
    try:
        with pytest.raises(GenerationError, match="no response for 0.3 s") as e:
            _read_all(url, idle_s=0.3, hold_s=0)
        assert e.value.retryable
        deadline = time.monotonic() + 30
        while not model.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert model.cancelled
    finally:
        server.stop(grace=None)


def test_time_the_caller_holds_a_piece_is_not_idle_time():
    """Only the wait for the next message counts: a slow reader of the stream (its HTTP client) does
    not make a responsive server look silent."""
    server, url = served(Pieces(3, stall=False))
    try:
        assert len(_read_all(url, idle_s=0.3, hold_s=0.5)) == 3
    finally:
        server.stop(grace=None)
