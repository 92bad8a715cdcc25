"""The HTTP surface (FastAPI on uvicorn): /v1/chat/completions, /v1/completions, /v1/models,
/health, /metrics.

Errors are answered in OpenAI's format with OpenAI's statuses: 400 for anything wrong in the
request (malformed JSON included), 401 without a valid key, 404 for an unknown model or path,
503 with Retry-After when every Triton server is busy or down, 504 when the engine's request
timeout ran out. A stream reports errors that happen before its first token with these statuses
too (the response starts only once the first piece is there); later ones, which the failover could
not absorb, arrive as an `error` event, which the `openai` SDK raises.

A client that hangs up (streaming or not) ends its request at once: the gRPC call to Triton is
cancelled and the engine is told to stop it (see llmserve/client/aio.py).

Every request gets a request id and one access line when it is over (access.py); an unexpected
exception is logged there with its traceback and answered 500."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from .access import AccessLog, access
from .auth import KeyCheck
from .completion import Completion
from .errors import APIError, bad_request
from .protocol import ChatCompletionRequest, CompletionRequest
from .responses import CHAT, COMPLETION, DONE, Shape, dumps, sse
from .service import Service

JSON = "application/json"
log = logging.getLogger(__name__)


class ClientGone(Exception):
    pass


def error_response(e: APIError) -> Response:
    return Response(dumps(e.body()), status_code=e.status, media_type=JSON, headers=e.headers())


async def until_disconnect(request: Request, awaitable):
    """Await `awaitable` unless the client hangs up first (then cancel it and raise ClientGone)."""
    task = asyncio.ensure_future(awaitable)

    async def watch():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        watcher.cancel()
    if task.cancelled():
        raise ClientGone()
    return task.result()


def create_app(service: Service, keys: KeyCheck) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app):
        await service.start()
        try:
            yield
        finally:
            await service.close()

    app = FastAPI(
        title="llmserve OpenAI-compatible API", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )

    app.add_middleware(AccessLog)

    @app.exception_handler(APIError)
    async def _api_error(request, e: APIError):
        access(request).error = e.message  # the access line says why
        return error_response(e)

    @app.exception_handler(HTTPException)
    async def _http_error(request, e: HTTPException):
        msg = "Not found." if e.status_code == 404 else str(e.detail)
        access(request).error = msg
        return error_response(APIError(e.status_code, msg))

    @app.exception_handler(Exception)
    async def _internal(_request, e: Exception):
        # Reached only by an error outside AccessLog (which logs and answers the others itself).
        log.error("internal error", exc_info=e)
        return error_response(APIError(500, f"internal error: {type(e).__name__}"))

    @app.get("/health")
    async def health():
        # Ready when at least one Triton server is: HAProxy's check for the frontend.
        if service.client.ready():
            return Response(b'{"status":"ok"}', media_type=JSON)
        return Response(b'{"status":"no Triton server ready"}', status_code=503, media_type=JSON)

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models(request: Request):
        keys.check(request.headers.get("authorization"))
        return JSONResponse({"object": "list", "data": [service.model_card()]})

    @app.get("/v1/models/{name:path}")
    async def model(name: str, request: Request):
        keys.check(request.headers.get("authorization"))
        service.check_model(name)
        return JSONResponse(service.model_card())

    async def complete(request: Request, kind: type):
        arrival = time.monotonic()
        keys.check(request.headers.get("authorization"))
        limit = max(1 << 20, 4 * service.builder.max_prompt_bytes)  # a prompt that could fit, in JSON
        if int(request.headers.get("content-length") or 0) > limit:
            raise APIError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")
        raw = await request.body()
        if len(raw) > limit:
            raise APIError(413, f"The request body is larger than {limit} bytes.", code="request_too_large")
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise bad_request(None, f"We could not parse the JSON body of your request ({e}).") from None
        req, prompts, reply = await service.prepare(kind, data, len(raw))
        chat = kind is ChatCompletionRequest
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        shape = Shape(CHAT if chat else COMPLETION, rid, int(time.time()), req.model)
        record = access(request)
        # Triton gets the request id (the client's X-Request-Id or ours; `-c<k>` per choice when there
        # are several), not the completion id: one id to follow through every log.
        done = Completion(service, req, prompts, reply, record.request_id, arrival)
        record.runs = done.runs
        if not req.stream:
            try:
                choices, use = await until_disconnect(request, done.whole())
            except ClientGone:
                return Response(status_code=499)  # nobody reads it
            return Response(dumps(shape.whole(choices, use)), media_type=JSON)
        gen = done.events()
        try:
            first = await until_disconnect(request, anext(gen, None))
        except ClientGone:
            await gen.aclose()
            return Response(status_code=499)
        except APIError:
            await gen.aclose()
            raise
        return StreamingResponse(
            events(done, shape, req, first, gen, record),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def events(done: Completion, shape: Shape, req, first, gen, record) -> AsyncIterator[bytes]:
        with_usage = req.include_usage
        continuous = bool(req.stream_options and req.stream_options.continuous_usage_stats)

        def send(obj):
            if continuous:
                obj["usage"] = done.usage()
            return sse(obj)

        def chunk(k: int, delta, logprobs, reason=None):
            b = done.builders[k]
            if done.chat:
                return send(shape.chat_chunk(b.index, delta, logprobs, reason, with_usage))
            return send(shape.text_chunk(b.index, delta, logprobs, reason, with_usage))

        try:
            if done.chat:
                for k, b in enumerate(done.builders):
                    yield chunk(k, b.first(), None)
            item = first
            while item is not None:
                k, piece = item
                b = done.builders[k]
                if piece is not None:
                    delta, logprobs = b.feed(piece)
                    if delta or logprobs:
                        yield chunk(k, delta, logprobs)
                elif done.chat:
                    last, reason = b.finish(done.runs[k].finish_reason)
                    if last:  # what was held back (tool calls, text), then the finish reason alone, as OpenAI
                        yield chunk(k, last, None)
                    yield chunk(k, {}, None, reason)
                else:
                    yield chunk(k, b.flush(), None, done.runs[k].finish_reason)
                item = await anext(gen, None)
            if with_usage:
                yield sse(shape.usage_chunk(done.usage()))
            yield DONE
        except APIError as e:
            record.error = e.message  # the stream had started (status 200): the access line says it failed
            yield sse(e.body())
            yield DONE
        except BaseException:  # cancelled or closed before the end: the client went away
            record.hung_up = True
            raise
        finally:
            await gen.aclose()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await complete(request, ChatCompletionRequest)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await complete(request, CompletionRequest)

    return app
