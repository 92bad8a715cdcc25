"""The request id and the access line: an ASGI middleware around every HTTP request.

Request id: the client's `X-Request-Id` header when it has one (1-128 characters of letters, digits
and `._:@/+=-`; the convention of vLLM, nginx and most proxies: a caller who already has an id for
its request can follow it through our logs), else one minted here (`req-` + 32 hex digits). It is
returned in the response's `X-Request-Id` header, set as the logging context of everything the
request runs (llmserve.logs), and sent to Triton as the gRPC request id, with `-<attempt>` appended
(`req-...-1`, `-2` for a retry or resume on another server), so tritonserver's lines of that request
carry it too. The Triton id must be unique while the request runs (a `stop` request cancels by id):
an id that another request of this frontend is still using, in any of its worker processes
(InflightIds), gets a random suffix (`<id>.<6 hex>`), which the response header then returns.

Access line: one per request when it is over (for a stream: when its last byte went out), at INFO
(WARNING for a 5xx), on the logger `llmserve.openai_api.access`:
    POST /v1/chat/completions 200 1.234 s completion_tokens=32 client=127.0.0.1:50412
plus `retries=`, `resumes=` when the failover needed them, `error="..."` with the cause when the
request failed (WARNING also when a stream that had started ends with an error event),
`hung_up=True` when the client went away mid-stream, and for a request that got tokens
`first_byte_ms=` (arrival -> first body bytes out) and `triton_first_ms=` (sent to Triton -> its
first token): their difference is the time to first token this frontend added. JSON lines carry the
same as fields (method, path, status, duration_ms, completion_tokens, retries, resumes, error,
hung_up, first_byte_ms, triton_first_ms, client). /health and /metrics,
polled every second by load balancers and Prometheus, log at DEBUG. A client that hung up: 499."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..logs import request_context
from .errors import APIError
from .responses import dumps

log = logging.getLogger(__name__)

HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
_QUIET = ("/health", "/metrics")
KEY = "llmserve.access"  # the request's Access record in the ASGI scope
IDS_ENV = "LLMSERVE_OPENAI_INFLIGHT_DIR"  # set by workers.py: the folder the workers share for InflightIds


@dataclass
class Access:
    """What the routes tell the access line about their request."""

    request_id: str
    runs: list = field(default_factory=list)  # service.Run of each choice, once sent: tokens, retries, resumes
    error: str | None = None
    hung_up: bool = False  # the client closed the connection before the end (a stream's status stays 200)
    first_byte_at: float | None = None  # monotonic: the first body bytes handed to the server (a stream's first chunk)


def access(request) -> Access:
    """The Access record of a request (Starlette Request or ASGI scope)."""
    scope = getattr(request, "scope", request)
    return scope[KEY]


def mint() -> str:
    return f"req-{uuid.uuid4().hex}"


class InflightIds:
    """The request ids in flight in this frontend. One process: a set. Several workers (workers.py
    passes a shared folder): a file per id, created with O_EXCL, so two workers cannot both take an id
    (a client may send the same X-Request-Id twice, on two connections that two workers accept). A
    worker that dies leaves its files: a later request with one of those ids gets a suffix."""

    def __init__(self, folder: str | None = None):
        self.folder = folder
        self.ids: set[str] = set()

    def _path(self, rid: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(rid.encode()).hexdigest()[:40])

    def claim(self, rid: str) -> bool:
        """Take rid; False if another request has it."""
        if rid in self.ids:
            return False
        if self.folder:
            try:
                os.close(os.open(self._path(rid), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except OSError as e:
                if e.errno == errno.EEXIST:
                    return False
                raise
        self.ids.add(rid)
        return True

    def release(self, rid: str) -> None:
        if rid in self.ids:
            self.ids.discard(rid)
            if self.folder:
                try:
                    os.unlink(self._path(rid))
                except FileNotFoundError:
                    pass


class AccessLog:
    """Pure ASGI middleware (not BaseHTTPMiddleware: that buffers streaming responses)."""

    def __init__(self, app):
        self.app = app
        self.inflight = InflightIds(os.environ.get(IDS_ENV))

    def _request_id(self, scope) -> str:
        """The request's id, taken in self.inflight (released when the request is over)."""
        given = next((v for k, v in scope.get("headers", ()) if k == HEADER.encode()), b"").decode("latin-1")
        rid = base = given if _VALID.fullmatch(given) else mint()
        while not self.inflight.claim(rid):
            rid = f"{base}.{secrets.token_hex(3)}"
        return rid

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = self._request_id(scope)
        record = scope[KEY] = Access(rid)
        status = [0]
        started = time.monotonic()

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), (HEADER.encode(), rid.encode())]}
            elif record.first_byte_at is None and message.get("body"):
                record.first_byte_at = time.monotonic()
            await send(message)

        with request_context(rid):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as e:
                record.error = f"internal error: {type(e).__name__}: {e}"
                log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
                if status[0]:
                    raise  # the response had started: nothing else can be said to the client
                status[0] = 500
                err = APIError(500, f"internal error: {type(e).__name__}")
                await send_with_id(
                    {"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"application/json")]}
                )
                await send_with_id({"type": "http.response.body", "body": dumps(err.body())})
            finally:
                self.inflight.release(rid)
                self._line(scope, record, status[0] or 499, started)

    @staticmethod
    def _line(scope, record: Access, status: int, started: float) -> None:
        seconds = time.monotonic() - started
        path = scope.get("path", "")
        level = (
            logging.DEBUG
            if path in _QUIET and status < 500
            else logging.WARNING
            if status >= 500 or (record.error and status < 400)
            else logging.INFO
        )
        if not log.isEnabledFor(level):
            return
        client = scope.get("client")
        fields: dict[str, Any] = {
            "request_id": record.request_id,
            "method": scope.get("method"),
            "path": path,
            "status": status,
            "duration_ms": round(seconds * 1000, 1),
        }
        if record.runs:
            fields["completion_tokens"] = sum(r.completion_tokens for r in record.runs)
            if retries := sum(r.trace.retries for r in record.runs):
                fields["retries"] = retries
            if resumes := sum(r.trace.resumes for r in record.runs):
                fields["resumes"] = resumes
            # Where the first token's time went: first_byte_ms from the request's arrival to its first body
            # bytes (a stream's first chunk), triton_first_ms from sending it to Triton to Triton's first
            # token; the difference is what this frontend added (the client's own side not included).
            run = record.runs[0]
            if record.first_byte_at is not None and run.first_at is not None and run.trace.dispatched_at is not None:
                fields["first_byte_ms"] = round((record.first_byte_at - started) * 1000, 1)
                fields["triton_first_ms"] = round((run.first_at - run.trace.dispatched_at) * 1000, 1)
        if record.error:
            fields["error"] = record.error
        if record.hung_up:
            fields["hung_up"] = True
        if client:
            fields["client"] = f"{client[0]}:{client[1]}"
        extra = " ".join(
            f"{k}={json.dumps(v)}" if k == "error" else f"{k}={v}"
            for k, v in fields.items()
            if k not in ("request_id", "method", "path", "status", "duration_ms")
        )
        log.log(
            level,
            "%s %s %d %.3f s%s",
            fields["method"],
            path,
            status,
            seconds,
            " " + extra if extra else "",
            extra=fields,
        )
