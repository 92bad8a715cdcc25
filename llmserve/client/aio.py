"""The frontend's way to the ensemble: gRPC bidirectional streaming (ModelStreamInfer) to one or
more Triton servers, with the failover client's rules (llmserve.client.failover) made asynchronous.

- Every request streams from the ensemble (`stream=true`), also when the OpenAI client did not ask
  for a stream: the frontend joins the pieces. So one code path serves both, a non-streamed answer
  survives a server failure the same way, and every token gives the engine a chance to notice a
  cancellation (the ensemble schedules a postprocessing step per streamed response).
- Endpoints are Triton servers themselves, not a load balancer, so that the frontend knows which
  server holds a request (to cancel it there) and picks the least busy healthy one itself. A
  background task polls each server's readiness (`ServerReady`, Triton's strict readiness) every
  `health_interval_s`; a server that fails a request is avoided until it is ready again.
- Retried on another server before any token (same classification as the failover client):
  connection failures, UNAVAILABLE/INTERNAL/... statuses, in-band errors that are not the client's
  fault, and "server busy". Resumed after tokens: the same request with the prompt + the text so
  far and the remaining budget (`resume_request`, shared with the failover client), so the caller
  sees one uninterrupted stream; a greedy stream resumed this way equals an uninterrupted one when
  the text re-tokenizes into the tokens that produced it (the normal case for real text).
- Cancellation: when the caller stops (its HTTP client hung up), the gRPC call is cancelled, which
  cancels the ensemble request in Triton, and, when the token-level contract has a `stop` input
  (TensorRT-LLM's way to stop a request by id, which reaches a running `tensorrt_llm` step where
  Triton 2.51's ensemble cancellation does not), a `stop` request with the same request id goes to
  that server's `tensorrt_llm`."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import AsyncIterator, Optional

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from ..contract import ENGINE, ENGINE_INPUTS, ENSEMBLE, ENSEMBLE_INPUTS, by_name
from ..errors import is_request_error
from ..openai_api.errors import APIError, busy
from .failover import GRPC_RETRY, resume_request

_ENSEMBLE_TYPES = by_name(ENSEMBLE_INPUTS)
STOP_INPUT = "stop" in by_name(ENGINE_INPUTS)
BUSY_MESSAGES = ("server busy", "Exceeds maximum queue size")
MAX_MESSAGE = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE),
    # A restarted server is found again within about a second (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # A peer that vanished without closing the connection (host or network gone) is found by
    # keepalive pings on open calls. Not more often than Triton's server-side minimum (gRPC's
    # default 5 min without data): more frequent pings get the connection closed ("too_many_pings").
    ("grpc.keepalive_time_ms", 300_000), ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
]


class Retryable(Exception):
    """This attempt failed in a way another server may not: retry (no token yet) or resume."""

    def __init__(self, message: str, *, busy: bool = False):
        super().__init__(message)
        self.busy = busy


@dataclass
class Piece:
    text: str
    tokens: int


@dataclass
class Trace:
    """What happened to one request: for metrics, logs and tests."""

    attempts: int = 0
    retries: int = 0
    resumes: int = 0
    tokens: int = 0
    endpoints: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dispatched_at: Optional[float] = None  # monotonic time the first attempt went out


def _tensor(req: service_pb2.ModelInferRequest, name: str, value, triton_dtype: str) -> None:
    if triton_dtype == "STRING":
        values = value if isinstance(value, list) else [value]
        arr = np.array([[v.encode("utf-8") for v in values]], dtype=np.object_)
        raw, dtype = serialize_byte_tensor(arr).item(), "BYTES"
    else:
        arr = np.array([[value]], dtype=_ENSEMBLE_TYPES[name].np_dtype)
        raw, dtype = arr.tobytes(), triton_dtype
    t = req.inputs.add()
    t.name, t.datatype = name, dtype
    t.shape.extend(arr.shape)
    req.raw_input_contents.append(raw)


def ensemble_request(body: dict, request_id: str, model: str = ENSEMBLE) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, value in body.items():
        _tensor(req, name, value, _ENSEMBLE_TYPES[name].dtype)
    # Without this a stream whose last response carries no tensors would never say it is over.
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


def stop_request(request_id: str, model: str = ENGINE) -> service_pb2.ModelInferRequest:
    """TensorRT-LLM's stop-by-id: the engine cancels the request with this id. The required inputs
    carry placeholders; a stop request generates nothing."""
    req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    types = by_name(ENGINE_INPUTS)
    for name, value in (("input_ids", 0), ("input_lengths", 1), ("request_output_len", 1), ("stop", True)):
        arr = np.array([[value]], dtype=types[name].np_dtype)
        t = req.inputs.add()
        t.name, t.datatype = name, types[name].dtype
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(arr.tobytes())
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


def read_piece(resp: service_pb2.ModelInferResponse) -> Optional[Piece]:
    """text_output and the token count (one FP32 log-prob per token) of one streamed response,
    read from the raw bytes (no numpy: this runs for every response of every stream). A BYTES
    element is a 4-byte little-endian length and the bytes."""
    raw = {o.name: resp.raw_output_contents[i] for i, o in enumerate(resp.outputs)} if resp.raw_output_contents else {}
    if "text_output" not in raw:
        if not any(o.name == "text_output" for o in resp.outputs):
            return None
        result = InferResult(resp)  # contents in the typed fields instead: the general path
        text = result.as_numpy("text_output")
        lp = result.as_numpy("output_log_probs")
        return Piece(b"".join(text.reshape(-1)).decode("utf-8"), int(lp.size) if lp is not None else 1)
    buf, parts, i = raw["text_output"], [], 0
    while i + 4 <= len(buf):
        n = int.from_bytes(buf[i:i + 4], "little")
        parts.append(buf[i + 4:i + 4 + n])
        i += 4 + n
    lp = raw.get("output_log_probs")
    return Piece(b"".join(parts).decode("utf-8"), len(lp) // 4 if lp is not None else 1)


def classify(message: str) -> str:
    """An in-band error message from Triton or a model -> 'request' | 'busy' | 'timeout' | 'server'."""
    if any(b in message for b in BUSY_MESSAGES):
        return "busy"
    if message.startswith("timeout") or "request_timeout_s" in message:
        return "timeout"
    if is_request_error(message):
        return "request"
    return "server"


class Endpoint:
    def __init__(self, url: str):
        self.url = url
        self.channel = grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.healthy = True  # optimistic until the first check says otherwise
        self.inflight = 0

    async def check(self, timeout_s: float) -> bool:
        try:
            r = await self.stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=timeout_s)
            self.healthy = bool(r.ready)
        except grpc.RpcError:
            self.healthy = False
        return self.healthy


class EnsembleClient:
    def __init__(self, endpoints: list[str], *, idle_timeout_s: float = 630, max_attempts: int = 6,
                 backoff_s: float = 0.05, max_backoff_s: float = 1.0, health_interval_s: float = 0.5,
                 model: str = ENSEMBLE):
        if not endpoints:
            raise ValueError("at least one Triton gRPC endpoint is needed")
        self.urls = list(endpoints)
        self.endpoints: list[Endpoint] = []
        self.idle_timeout_s, self.max_attempts = idle_timeout_s, max_attempts
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.health_interval_s, self.model = health_interval_s, model
        self._rotate = itertools.count(random.randrange(1 << 16))
        self._health: Optional[asyncio.Task] = None
        self._background: set[asyncio.Task] = set()

    # --- lifecycle (inside the server's event loop) ---------------------------------------------
    async def start(self) -> None:
        self.endpoints = [Endpoint(u) for u in self.urls]
        await asyncio.gather(*(e.check(self.health_interval_s * 4) for e in self.endpoints))
        self._health = asyncio.create_task(self._health_loop())

    async def close(self) -> None:
        if self._health:
            self._health.cancel()
        for e in self.endpoints:
            await e.channel.close()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            await asyncio.gather(*(e.check(max(1.0, self.health_interval_s * 2)) for e in self.endpoints))

    def ready(self) -> bool:
        return any(e.healthy for e in self.endpoints)

    def pick(self, avoid: set[str]) -> Endpoint:
        """The least busy healthy server not tried for this request; else any not tried; else any."""
        for pool in ([e for e in self.endpoints if e.healthy and e.url not in avoid],
                     [e for e in self.endpoints if e.url not in avoid], self.endpoints):
            if pool:
                start = next(self._rotate) % len(pool)
                ordered = pool[start:] + pool[:start]
                return min(ordered, key=lambda e: e.inflight)
        raise AssertionError("no endpoints")

    def _spawn(self, coro) -> None:
        # Detached from the request's task: cleanup must run even though that task is being cancelled.
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- one attempt on one server ----------------------------------------------------------------
    async def _attempt(self, ep: Endpoint, body: dict, request_id: str, trace: Trace) -> AsyncIterator[Piece]:
        call = ep.stub.ModelStreamInfer()
        finished = False
        ep.inflight += 1
        try:
            try:
                await call.write(ensemble_request(body, request_id, self.model))
                if trace.dispatched_at is None:
                    trace.dispatched_at = time.monotonic()
                while True:
                    msg = await asyncio.wait_for(call.read(), self.idle_timeout_s)
                    if msg is grpc.aio.EOF:
                        raise Retryable(f"{ep.url}: stream ended before the final response")
                    if msg.error_message:
                        kind = classify(msg.error_message)
                        if kind == "request":
                            raise APIError(400, msg.error_message, code="invalid_request")
                        if kind == "timeout":
                            raise APIError(504, msg.error_message, code="timeout")
                        raise Retryable(f"{ep.url}: {msg.error_message}", busy=kind == "busy")
                    piece = read_piece(msg.infer_response)
                    if piece is not None:
                        yield piece
                    final = msg.infer_response.parameters.get("triton_final_response")
                    if final is not None and final.bool_param:
                        finished = True
                        await call.done_writing()
                        return
            except asyncio.TimeoutError:
                raise Retryable(f"{ep.url}: no response for {self.idle_timeout_s:g} s") from None
            except grpc.aio.AioRpcError as e:
                code = str(e.code())
                if code == "StatusCode.INVALID_ARGUMENT":
                    raise APIError(400, e.details() or code, code="invalid_request") from None
                if code in GRPC_RETRY or code in ("StatusCode.NOT_FOUND", "StatusCode.UNIMPLEMENTED"):
                    if code == "StatusCode.UNAVAILABLE":
                        ep.healthy = False
                    raise Retryable(f"{ep.url}: {code}: {e.details()}", busy=code == "StatusCode.RESOURCE_EXHAUSTED") from None
                raise APIError(502, f"{ep.url}: {code}: {e.details()}") from None
        finally:
            ep.inflight -= 1
            if not finished:
                call.cancel()
                if STOP_INPUT:  # also before the first token: the request may wait in the engine's queue
                    self._spawn(self._stop(ep, request_id))

    async def _stop(self, ep: Endpoint, request_id: str) -> None:
        call = ep.stub.ModelStreamInfer()
        try:
            await call.write(stop_request(request_id))
            while True:  # one (empty) final response; errors are no concern of the caller's
                msg = await asyncio.wait_for(call.read(), 10)
                if msg is grpc.aio.EOF or msg.error_message:
                    break
                final = msg.infer_response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    break
        except (grpc.RpcError, asyncio.TimeoutError):
            pass
        finally:
            call.cancel()

    # --- the request, across servers -----------------------------------------------------------
    async def generate(self, request: dict, request_id: str, trace: Trace) -> AsyncIterator[Piece]:
        """Stream `request` (ensemble inputs; text_input already rendered, apply_chat_template false),
        retrying and resuming on other servers; raises APIError when it cannot."""
        budget = request["max_tokens"]
        text: list[str] = []
        tried: set[str] = set()
        failures, last_busy = 0, False
        while True:
            body = request if not trace.tokens else resume_request(request, request["text_input"], "".join(text),
                                                                   trace.tokens)
            ep = self.pick(tried)
            trace.attempts += 1
            trace.endpoints.append(ep.url)
            try:
                async with aclosing(self._attempt(ep, body, f"{request_id}-{trace.attempts}", trace)) as pieces:
                    async for piece in pieces:
                        trace.tokens += piece.tokens
                        if piece.text:
                            text.append(piece.text)
                        yield piece
                return
            except Retryable as e:
                trace.errors.append(str(e))
                tried.add(ep.url)
                if len(tried) == len(self.endpoints):
                    tried.clear()  # every server failed once: any may be back
                if trace.tokens >= budget:
                    return  # the cut came after the last token
                if trace.tokens:
                    trace.resumes += 1
                else:
                    trace.retries += 1
                failures, last_busy = failures + 1, e.busy
                if failures >= self.max_attempts:
                    if last_busy:
                        raise busy(f"every Triton server is busy; retry later ({e})") from None
                    raise APIError(503, f"no Triton server could serve the request after {failures} attempts: {e}",
                                   code="unavailable", retry_after_s=1) from None
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
