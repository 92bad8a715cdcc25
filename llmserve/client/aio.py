"""The async failover client (the OpenAI frontend's way to Triton): gRPC bidirectional streaming
(ModelStreamInfer) to one or more Triton servers, with the failover policy of retry.py, which the sync
client (failover.py) follows too. It raises retry.GenerationError (GaveUp when every attempt failed);
the frontend maps those to its HTTP answers.

- Two routes (`Route`): `generate` streams text from the ensemble; `generate_tokens` streams token
  ids from the token-level model itself (`tensorrt_llm`, or `tensorrt_llm_cpp` past the relay on the
  tensorrtllm layout), detokenized and stop-matched here by a StreamText, so no Python hop of the
  ensemble handles each token (openai.token_level). Both share the attempt, failover and stop code.
- Every request streams (`stream=true`), also when the OpenAI client did not ask for a stream: the
  frontend joins the pieces. So one code path serves both, and a non-streamed answer survives a server
  failure the same way.
- Endpoints are Triton servers themselves, not a load balancer, so that the frontend knows which
  server holds a request (to cancel it there) and picks the least busy healthy one itself. A
  background task polls each server's readiness (`ServerReady`, Triton's strict readiness) every
  `health_interval_s`; a server that fails a request is avoided until it is ready again. A server
  listed in `drained_file` (looked at before every pick and every poll) counts as not ready without being asked, and
  is not picked while another server exists, even one not seen ready yet: a
  rolling restart lists a server there before it stops it (deploy/cluster.py), since a request that
  reaches a stopping tritonserver can keep its engine model loaded until the exit timeout
  (docs/cancellation.md section 4).
- Retried on another server before any token (retry.py): connection failures,
  UNAVAILABLE/INTERNAL/... statuses, in-band errors that are neither the client's fault nor a
  request timeout (busy included). Resumed after tokens: the same request with the prompt + what came
  so far and the remaining budget, so the caller sees one uninterrupted stream. On the token-level
  route that is the token ids themselves (exact); through the ensemble it is the text, and a greedy
  stream resumed so equals an uninterrupted one when the text re-tokenizes into the tokens that
  produced it (the normal case for real text).
- Cancellation: when the caller stops (its HTTP client hung up), the gRPC call is cancelled, and,
  when the token-level contract has a `stop` input (TensorRT-LLM's way to stop a request by id, which
  reaches a running `tensorrt_llm` step where Triton 2.51's ensemble cancellation does not), a `stop`
  request with the same request id goes to that server's token-level model. A stop string matched on
  the token-level route stops the request by id and then ends its stream (never a cancel)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from ..contract import ENGINE, ENSEMBLE
from ..text.stream_text import StreamText
from .retry import (
    Attempts,
    Backoff,
    GenerationError,
    Picker,
    Server,
    Stats,
    StreamBroken,
    TokenAttempts,
    grpc_error,
    http_error,
    in_band_error,
)
from .wire import (
    STOP_SUPPORTED,
    Piece,
    ensemble_request,
    event_tokens,
    is_final,
    read_piece,
    read_tokens,
    stop_request,
    token_request,
)

__all__ = ["EnsembleClient", "GenerationError", "Piece", "Stats"]

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    # A restarted server is found again within about a second (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A peer that vanished without closing the connection (host or network gone) is found by
    # keepalive pings on open calls. Not more often than Triton's server-side minimum (gRPC's
    # default 5 min without data): more frequent pings get the connection closed ("too_many_pings").
    ("grpc.keepalive_time_ms", 300_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
]
# Shorter than the sync client's: servers are picked by health here, so a retry rarely meets the same fault.
BACKOFF_S, MAX_BACKOFF_S = 0.05, 1.0
# How long close() waits for the stops of abandoned streams (one round trip each, well under a second).
STOP_DRAIN_S = 5.0
STOP_ANSWER_S = 10.0  # how long one stop waits for its answer
CONNECT_S = 5.0  # an HTTP connection to a Triton server that is up takes milliseconds
# An idle pooled HTTP connection is closed this soon (aiohttp checks about as often): Triton's SIGTERM
# waits for every open HTTP connection, so one kept alive past a rolling restart's drain held the
# replica for its whole exit timeout ("Found 4 HTTP service connections", CI 2026-12-07). Well under the
# restart's wait before SIGTERM (deploy/frontend.settle_s, at least 0.5 s); under load a freed
# connection is taken again at once, and a new one on a lost reuse costs a local TCP connect.
IDLE_KEEPALIVE_S = 0.25


async def end_stream(call, timeout_s: float) -> None:
    """End a stream whose final response was read: close our side and read to the server's end.
    Never by a cancel (nor by dropping the call, which grpc.aio turns into one): Triton 2.51 leaks a
    stream cancelled in the moment its final response left the model (its gRPC frontend then waits
    for a callback that never comes, keeping the request and so the model alive: SIGTERM waits out
    the whole exit timeout; docs/cancellation.md section 4). An end that fails cancels after all."""
    try:
        await call.done_writing()
        while await asyncio.wait_for(call.read(), timeout_s) is not grpc.aio.EOF:
            pass
    except (grpc.RpcError, asyncio.TimeoutError):
        call.cancel()


@dataclass(frozen=True)
class Route:
    """How one kind of request travels: `encode(body, request_id, ensemble model name)` makes its
    ModelInferRequest, `read(response)` the Piece of a streamed response (None: none), `stop_model`
    takes the stop by id of a request given up, and `stopped()` true after a piece means the caller
    has all it wants (a stop string matched): the engine's request is stopped by its id and its stream
    read to the end in the background."""

    encode: Callable
    read: Callable
    stop_model: str
    stopped: Callable[[], bool]
    http_read: Callable | None = None
    """Over HTTP generate_stream (openai.token_transport): the Piece of one event; `http_end()` the
    Piece the stream's end releases (there is no final response to read it from)."""
    http_end: Callable | None = None


ENSEMBLE_ROUTE = Route(lambda body, rid, model: ensemble_request(body, rid, model), read_piece, ENGINE, lambda: False)


class Endpoint(Server):
    def __init__(self, url: str, http_url: str | None = None):
        super().__init__(url)
        self.http_url = http_url  # the same server's HTTP host:port (token_transport http)
        self.channel = grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    async def check(self, timeout_s: float) -> bool:
        try:
            r = await self.stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=timeout_s)
            self.healthy = bool(r.ready)
        except grpc.RpcError:
            self.healthy = False
        return self.healthy


def read_drained(path: str | Path | None) -> set[str]:
    """The endpoints a drained file lists (none when there is no such file)."""
    if not path:
        return set()
    try:
        return {line.strip() for line in Path(path).read_text().splitlines() if line.strip()}
    except OSError:  # not written yet, or removed: nothing is drained
        return set()


class Drained:
    """The drained file, looked at before every pick (one stat, a few microseconds) and re-read only
    when it changed: set_drained replaces it atomically, so a new inode or mtime is a new list. Waiting
    for the next health poll instead left a window (the poll's interval plus its checks' duration, on
    a loaded machine more than the rolling restart's settle time) in which new requests still reached
    a server about to stop."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._key: tuple | None = None
        self._urls: set[str] = set()

    def urls(self) -> set[str]:
        if self.path is None:
            return self._urls
        try:
            st = self.path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            key = None
        if key != self._key:
            self._key, self._urls = key, read_drained(self.path) if key else set()
        return self._urls

    def apply(self, endpoints) -> set[str]:
        """Marks the listed endpoints not ready; returns the list."""
        urls = self.urls()
        for e in endpoints:
            if e.url in urls:
                e.healthy = False
        return urls


class EnsembleClient:
    """endpoints: Triton gRPC host:port, one per server. The knobs come from the spec's `openai:`
    section (openai_api/config.py): idle_timeout_s, max_attempts, health_interval_s."""

    def __init__(
        self,
        endpoints: list[str],
        *,
        idle_timeout_s: float,
        max_attempts: int,
        health_interval_s: float,
        model: str = ENSEMBLE,
        drained_file: str | Path | None = None,
        http_endpoints: list[str] | None = None,
    ):
        if not endpoints:
            raise ValueError("at least one Triton gRPC endpoint is needed")
        if http_endpoints is not None and len(http_endpoints) != len(endpoints):
            raise ValueError(
                f"{len(http_endpoints)} HTTP endpoints for {len(endpoints)} gRPC ones: one per Triton server, in order"
            )
        self.urls = list(endpoints)
        self.http_urls = list(http_endpoints) if http_endpoints is not None else None
        self.session: aiohttp.ClientSession | None = None
        self.endpoints: list[Endpoint] = []
        self.idle_timeout_s, self.health_interval_s, self.model = idle_timeout_s, health_interval_s, model
        self.drained = Drained(drained_file)
        self.backoff = Backoff(BACKOFF_S, MAX_BACKOFF_S, max_attempts)
        self.picker = Picker()
        self._health: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()

    # --- lifecycle (inside the server's event loop) ---------------------------------------------
    async def start(self) -> None:
        self.endpoints = [Endpoint(u, h) for u, h in zip(self.urls, self.http_urls or [None] * len(self.urls))]
        if self.http_urls is not None:
            # One connection per open stream (keep-alive between them): no pool limit of ours.
            self.session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=IDLE_KEEPALIVE_S)
            )
        await self._check_all(self.health_interval_s * 4)
        self._health = asyncio.create_task(self._health_loop())

    async def close(self, drain_s: float = STOP_DRAIN_S) -> None:
        """The stops sent for abandoned streams finish first (at most drain_s): a stop cut short leaves
        its generation running to its end, and one that reaches tritonserver as it stops can keep the
        engine model loaded until Triton's exit timeout (docs/cancellation.md)."""
        if self._health:
            self._health.cancel()
        if self._background:
            _, late = await asyncio.wait(set(self._background), timeout=drain_s)
            if late:
                log.warning("%d stop(s) still unanswered after %g s at shutdown", len(late), drain_s)
        for e in self.endpoints:
            await e.channel.close()
        if self.session is not None:
            await self.session.close()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await self._check_all(max(1.0, self.health_interval_s * 2))

    async def _check_all(self, timeout_s: float) -> None:
        drained = self.drained.apply(self.endpoints)
        await asyncio.gather(*(e.check(timeout_s) for e in self.endpoints if e.url not in drained))
        self.drained.apply(self.endpoints)  # drained while the checks ran: their "ready" does not count

    def ready(self) -> bool:
        return any(e.healthy for e in self.endpoints)

    def _spawn(self, coro) -> None:
        # Detached from the request's task: cleanup must run even though that task is being cancelled.
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- one attempt on one server ----------------------------------------------------------------
    async def _attempt(
        self, ep: Endpoint, body: dict, request_id: str, stats: Stats, route: Route = ENSEMBLE_ROUTE
    ) -> AsyncIterator[Piece]:
        """Send `body` the `route`'s way and yield the Piece of each streamed response that has one."""
        call = ep.stub.ModelStreamInfer()
        finished = False
        stop_model, read, stopped = route.stop_model, route.read, route.stopped
        ep.inflight += 1
        try:
            try:
                await call.write(route.encode(body, request_id, self.model))
                if stats.dispatched_at is None:
                    stats.dispatched_at = time.monotonic()
                while True:
                    msg = await asyncio.wait_for(call.read(), self.idle_timeout_s)
                    if msg is grpc.aio.EOF:
                        raise GenerationError("stream ended before the final response", retryable=True)
                    if msg.error_message:
                        raise in_band_error(msg.error_message)
                    piece = read(msg.infer_response)
                    if piece is not None:
                        yield piece
                    if is_final(msg.infer_response):
                        finished = True
                        await end_stream(call, self.idle_timeout_s)
                        return
                    if stopped():
                        finished = True
                        self._spawn(self._stop_and_end(ep, call, request_id, stop_model))
                        return
            except asyncio.TimeoutError:
                raise GenerationError(f"no response for {self.idle_timeout_s:g} s", retryable=True) from None
            except grpc.aio.AioRpcError as e:
                code = str(e.code())
                if code == "StatusCode.UNAVAILABLE":
                    ep.healthy = False
                invalid = code == "StatusCode.INVALID_ARGUMENT"  # the message is the client's to read as is
                raise grpc_error(code, (e.details() or code) if invalid else f"{code}: {e.details()}") from None
        finally:
            ep.inflight -= 1
            if not finished:
                call.cancel()
                if STOP_SUPPORTED:  # also before the first token: the request may wait in the engine's queue
                    self._spawn(self._stop(ep, request_id, stop_model))

    async def _stop_and_end(self, ep: Endpoint, call, request_id: str, model: str) -> None:
        """A generation the caller is done with: stopped by its id (the engine answers with its final
        response), then its stream ended the way every stream here ends (end_stream, never a cancel)."""
        await self._stop(ep, request_id, model)
        await end_stream(call, STOP_ANSWER_S)

    async def _stop(self, ep: Endpoint, request_id: str, model: str = ENGINE) -> None:
        call = ep.stub.ModelStreamInfer()
        try:
            await call.write(stop_request(request_id, model))
            while True:  # one (empty) final response; errors are no concern of the caller's
                msg = await asyncio.wait_for(call.read(), STOP_ANSWER_S)
                if msg is grpc.aio.EOF:
                    return
                if msg.error_message or is_final(msg.infer_response):
                    return await end_stream(call, STOP_ANSWER_S)
        except (grpc.RpcError, asyncio.TimeoutError):
            call.cancel()  # no answer: a cancel is all that is left

    async def _attempt_http(self, ep: Endpoint, body: dict, request_id: str, stats: Stats, route: Route):
        """_attempt over Triton's HTTP generate_stream of the token-level model (openai.token_transport:
        http): the same inputs as JSON, one server-sent event per response, read with aiohttp, which
        costs a fraction of a grpc.aio read per response (docs/PERFORMANCE.md). The stream's end is its
        final response. Stops by id still go over gRPC (_stop); a hang-up closes the connection."""
        url = f"http://{ep.http_url}/v2/models/{route.stop_model}/generate_stream"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_S, sock_read=self.idle_timeout_s)
        finished, resp = False, None
        ep.inflight += 1
        try:
            try:
                # Stamped before the post: it returns with the response headers, which Triton's
                # generate_stream sends with the first response (after it, triton_first_ms read 0.1 ms).
                if stats.dispatched_at is None:
                    stats.dispatched_at = time.monotonic()
                resp = await self.session.post(url, json={"id": request_id, **body}, timeout=timeout)
                if resp.status != 200:
                    text = await resp.text()
                    try:
                        message = json.loads(text).get("error", text)
                    except ValueError:
                        message = text
                    raise http_error(resp.status, str(message))  # (what it is: by its message, as in-band)
                async for line in resp.content:
                    if not line.startswith(b"data: "):
                        continue
                    event = json.loads(line[6:])
                    if "error" in event:
                        raise in_band_error(str(event["error"]))
                    piece = route.http_read(event)
                    if piece is not None:
                        yield piece
                    if route.stopped():
                        finished = True
                        self._spawn(self._stop_and_drain(ep, resp, request_id, route.stop_model))
                        resp = None  # drained there
                        return
                finished = True
                last = route.http_end()
                if last is not None:
                    yield last
            except asyncio.TimeoutError:
                raise GenerationError(f"no response for {self.idle_timeout_s:g} s", retryable=True) from None
            except aiohttp.ClientConnectorError as e:
                ep.healthy = False
                raise grpc_error("StatusCode.UNAVAILABLE", f"cannot connect to {ep.http_url}: {e}") from None
            except (aiohttp.ClientError, ValueError) as e:  # cut mid-stream (server gone), or not our JSON
                raise StreamBroken(f"stream broke: {type(e).__name__}: {e}") from None
        finally:
            ep.inflight -= 1
            if resp is not None:
                if finished:
                    resp.release()
                else:
                    resp.close()  # the connection goes: Triton's request with it
            if not finished and STOP_SUPPORTED:
                self._spawn(self._stop(ep, request_id, route.stop_model))

    async def _stop_and_drain(self, ep: Endpoint, resp, request_id: str, model: str) -> None:
        """_stop_and_end for an HTTP stream: stopped by id, then read to its end (kept alive for reuse)."""
        await self._stop(ep, request_id, model)
        try:
            async with asyncio.timeout(STOP_ANSWER_S):
                async for _ in resp.content:
                    pass
            resp.release()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            resp.close()

    # --- the request, across servers -----------------------------------------------------------
    async def generate(self, request: dict, request_id: str, stats: Stats) -> AsyncIterator[Piece]:
        """Stream `request` (ensemble inputs; text_input already rendered, apply_chat_template false),
        retrying and resuming on other servers; raises GenerationError (GaveUp) when it cannot."""
        a = Attempts(request, self.backoff, stats, len(self.endpoints), lambda: request["text_input"])
        async for piece in self._across(a, request_id, stats, ENSEMBLE_ROUTE):
            yield piece

    async def generate_tokens(
        self, request: dict, request_id: str, stats: Stats, text: StreamText, model: str
    ) -> AsyncIterator[Piece]:
        """Stream a token-level `request` (inputs of `model`, the token-level model: input_ids,
        request_output_len, streaming, ...), its text made and stop strings matched by `text`;
        retried and resumed like `generate`, a resume continuing from the tokens themselves."""
        a = TokenAttempts(request, self.backoff, stats, len(self.endpoints), text.generated)

        def joined(*parts) -> Piece | None:
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
            ids = [t for p in parts for t in p.ids]
            lps = None if parts[0].logprobs is None else [x for p in parts for x in p.logprobs]
            return Piece("".join(p.text for p in parts), len(ids), ids, lps)

        def read(resp) -> Piece | None:
            got = read_tokens(resp)
            return joined(text.push(*got) if got is not None else None, text.finish() if is_final(resp) else None)

        def http_read(event: dict) -> Piece | None:
            got = event_tokens(event)
            return joined(text.push(*got)) if got is not None else None

        route = Route(
            lambda body, rid, _: token_request(body, rid, model),
            read,
            model,
            lambda: text.stopped,
            http_read if self.session is not None else None,
            lambda: joined(text.finish()),
        )
        async for piece in self._across(a, request_id, stats, route):
            yield piece

    async def _across(self, a: Attempts, request_id: str, stats: Stats, route: Route) -> AsyncIterator[Piece]:
        while True:
            drained = self.drained.apply(self.endpoints)
            # Never a drained server while another exists: the picker falls back to servers not known
            # ready, and the one just restarted may not be seen ready yet (its poll is late on a loaded
            # machine) when the restart drains the next and stops it.
            ep = self.picker.pick([e for e in self.endpoints if e.url not in drained] or self.endpoints, a.tried)
            a.begin(ep.url)
            try:
                body, rid = a.body(), f"{request_id}-{stats.attempts}"
                attempt = self._attempt_http if route.http_read is not None else self._attempt
                async with aclosing(attempt(ep, body, rid, stats, route)) as pieces:
                    async for piece in pieces:
                        a.received(piece.text, piece.tokens)
                        yield piece
                return
            except GenerationError as e:
                delay = a.failed(ep.url, e)
                if delay is None:
                    return  # the cut came after the last token
                await asyncio.sleep(delay)
