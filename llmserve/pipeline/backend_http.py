"""The relay's other way to the C++ backend (engine.tensorrtllm.relay_transport: http): Triton's HTTP
`generate_stream` on its own server, a thread per stream as over gRPC, each stream on a keep-alive
connection of its own (http_pool.py: taken from a pool, given back once its response is read to the end,
closed after half a second idle so that a stopping tritonserver does not wait for it).

Why: read a token at a time, grpc's synchronous stream costs 2.6-3.4x the client CPU per token of the
same thread-per-stream read of generate_stream's server-sent events (docs/PERFORMANCE.md, "The relay's
reader, by transport"). On an H100 host the relay's CPU per token fell 2.4-2.9x over HTTP and the
tensorrtllm layout's ensemble ran 1.2-1.5x faster (docs/perf-gpu.md, call 30).

What the generate endpoint cannot carry goes over gRPC (backend_grpc.Backend), per request:
- generation logits (top log-probs): vocabulary-sized rows as JSON numbers;
- an input whose shape the endpoint would not rebuild: it takes each input as one flat list and shapes
  it from the model's dims (the fixed dims first, the innermost variable dim takes the rest, any other
  variable dim 1: tritonserver's src/http_server.cc, ExactMappingInput). `generate_shape` is that rule,
  checked against every input's own shape; an empty input, a non-UTF-8 string or a float JSON cannot
  carry exactly (NaN, infinity, FP16) goes over gRPC too;
- request parameters (a top-level generate key that is no input becomes one; the relay sends none);
- every request while the HTTP endpoint refuses connections (a stopping tritonserver closes HTTP first).

A stop by id goes over gRPC, as before: it is one unary-like stream, off the per-token path.

`stream()` yields objects with the BLS response's interface, as backend_grpc's do, so the relay reads
both transports the same way."""

from __future__ import annotations

import http.client
import json
import logging
import math
from collections.abc import Iterator

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from ..contract import GENERATION_LOGITS
from .backend_grpc import Backend, stop_abandoned
from .http_pool import ConnectionPool
from .own_server import own_server_address

log = logging.getLogger(__name__)

HEADERS = {"Content-Type": "application/json"}
EVENT = b"data: "
# A connection the server closed while it sat in the pool fails at once, before the request reached a
# model: such a request is sent once more on a new connection. A new connection that fails so (refused, or
# reset: a stopping tritonserver resets new HTTP connections while it waits for the open ones to close, and
# keeps gRPC up meanwhile) sends its request over gRPC. (http.client.RemoteDisconnected is one of these.)
UNREACHABLE = ConnectionError


def generate_shape(dims: list[int], count: int) -> tuple[int, ...] | None:
    """The shape Triton's generate endpoint gives a flat list of `count` elements for an input of the
    model's `dims` (its metadata shape, the batch dim included); None where it refuses it."""
    shape, rest = list(dims), count
    for d in dims:
        if d != -1:
            if d == 0 or rest % d:
                return None
            rest //= d
    for i in range(len(shape) - 1, -1, -1):
        if shape[i] == -1:
            shape[i], rest = rest, 1
    return tuple(shape) if rest == 1 else None


def flat_json(arr: np.ndarray) -> list | None:
    """One input's values as the flat JSON list generate takes, or None where JSON cannot carry them
    exactly (bytes that are not UTF-8, a NaN or an infinity, half-precision floats)."""
    flat = arr.reshape(-1)
    if flat.dtype == np.object_ or flat.dtype.kind == "S":
        try:
            return [v.decode() if isinstance(v, bytes) else str(v) for v in flat.tolist()]
        except UnicodeDecodeError:
            return None
    if flat.dtype.kind == "f" and flat.dtype.itemsize < 4:  # FP16 (prompt tables, LoRA weights): no JSON form
        return None
    values = flat.tolist()
    if flat.dtype.kind == "f" and not all(math.isfinite(v) for v in values):
        return None
    return values


class _Tensor:
    def __init__(self, name: str, array: np.ndarray):
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class Response:
    """One server-sent event of generate_stream (or the error that refused the request), read like a
    BLS response. Its tensors are flat: the relay reshapes what it reads."""

    def __init__(self, event: dict, dtypes: dict[str, type]):
        self._event, self._dtypes = event, dtypes
        self._tensors: list[_Tensor] | None = None

    def has_error(self) -> bool:
        return "error" in self._event

    def error(self) -> Response:
        return self

    def message(self) -> str:
        return str(self._event.get("error", ""))

    def output_tensors(self) -> list[_Tensor]:
        if self._tensors is None:  # built once: pb.get_output_tensor_by_name asks for the list at every lookup
            self._tensors = [
                _Tensor(name, np.asarray(value, dtype=self._dtypes[name]).reshape(-1))
                for name, value in self._event.items()
                if name in self._dtypes
            ]
        return self._tensors


def _error_text(status: int, body: bytes) -> str:
    """The message of a refused generate request (Triton answers `{"error": "..."}`)."""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {body[:200].decode(errors='replace')}"


class HttpBackend:
    """generate_stream to this server, falling back to `grpc` for what it cannot carry (module doc)."""

    def __init__(self, address: str | None = None, grpc: Backend | None = None):
        self.grpc = grpc or Backend()
        self.pool = ConnectionPool(lambda: address or own_server_address("http"))
        self._models: dict[str, tuple[dict[str, list[int]], dict[str, type]]] = {}  # inputs' dims, outputs' dtypes

    def stream(
        self,
        model: str,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        request_id: str,
        parameters: dict | None = None,
    ) -> Iterator:
        """As backend_grpc.Backend.stream. `outputs`: generate returns every output of the model; these
        only decide the transport (generation logits go over gRPC)."""

        def over_grpc():
            return self.grpc.stream(model, inputs, outputs, request_id, parameters)

        if parameters or GENERATION_LOGITS in outputs:
            return over_grpc()
        try:
            dims, dtypes = self._metadata(model)
        except UNREACHABLE as e:  # the model's metadata, read once, could not be read: the endpoint is going
            log.info("%s over gRPC: HTTP endpoint unreachable (%s)", request_id, e)
            return over_grpc()
        body = self._body(dims, inputs, request_id)
        return over_grpc() if body is None else self._stream(model, body, dtypes, request_id, over_grpc)

    def stop(self, model: str, request_id: str) -> bool:
        return self.grpc.stop(model, request_id)

    @staticmethod
    def _body(dims: dict[str, list[int]], inputs, request_id: str) -> bytes | None:
        """The generate JSON of `inputs` (dims: the model's inputs'), or None where it cannot carry them."""
        body: dict = {"id": request_id} if request_id else {}
        for name, arr in inputs:
            values = flat_json(arr) if name in dims and arr.size else None
            if values is None or generate_shape(dims[name], arr.size) != arr.shape:
                return None
            body[name] = values
        return json.dumps(body).encode()

    def _metadata(self, model: str) -> tuple[dict[str, list[int]], dict[str, type]]:
        """The model's inputs' dims and outputs' dtypes, read once (its metadata endpoint)."""
        if model not in self._models:
            conn, _ = self.pool.take()
            r = self._send(conn, "GET", f"/v2/models/{model}")
            body = r.read()
            self.pool.give_back(conn, r)
            if r.status != 200:
                raise RuntimeError(f"metadata of {model}: {_error_text(r.status, body)}")
            meta = json.loads(body)
            self._models[model] = (
                {t["name"]: [int(d) for d in t["shape"]] for t in meta["inputs"]},
                {t["name"]: triton_to_np_dtype(t["datatype"]) for t in meta["outputs"]},
            )
        return self._models[model]

    def _post(self, model: str, body: bytes) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        path = f"/v2/models/{model}/generate_stream"
        conn, pooled = self.pool.take()
        try:
            return conn, self._send(conn, "POST", path, body)
        except UNREACHABLE:
            if not pooled:
                raise
        conn = self.pool.new()  # a pooled connection the server had closed meanwhile: once more on a new one
        return conn, self._send(conn, "POST", path, body)

    @staticmethod
    def _send(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None):
        """The response's head; the connection is closed if the exchange fails."""
        try:
            conn.request(method, path, body, HEADERS if body is not None else {})
            return conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def _stream(self, model: str, body: bytes, dtypes, request_id: str, over_grpc) -> Iterator[Response]:
        try:
            conn, r = self._post(model, body)
        except UNREACHABLE as e:
            log.info("%s over gRPC: HTTP endpoint unreachable (%s)", request_id, e)
            yield from over_grpc()
            return
        answered = False
        try:
            # A stream's status is its first response's (an error response from the model: 400 or 500
            # with the error as its event); a JSON body is a refusal before the request reached the model.
            if not r.getheader("Content-Type", "").startswith("text/event-stream"):
                answered = True
                yield Response({"error": _error_text(r.status, r.read())}, dtypes)
                return
            for line in r:  # one event per line; the blocking read releases the GIL
                if line.startswith(EVENT):
                    yield Response(json.loads(line[len(EVENT) :]), dtypes)
            answered = True  # the body's end: the backend's final response
        finally:
            # Closed before the end (the relay stopped reading: a send of its own failed): the request is
            # stopped by id, as over gRPC, and its remaining events are read so the connection can serve again.
            if not answered:
                stop_abandoned(self, model, request_id)
            try:
                if not answered:
                    for _ in r:
                        pass
            except (OSError, http.client.HTTPException) as e:
                log.debug("backend stream ended: %s", e)
            self.pool.give_back(conn, r)
