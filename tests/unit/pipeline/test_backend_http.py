"""The relay's HTTP way to the backend (pipeline/backend_http.py): what goes over generate_stream and what
over gRPC, the generate endpoint's shaping rule, and a stream's end (read to the end, the connection kept;
abandoned: stopped by id, drained) against a small HTTP server speaking generate_stream's wire format."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from tritonclient.utils import triton_to_np_dtype

from llmserve.pipeline.backend_http import HttpBackend, flat_json, generate_shape
from llmserve.pipeline.http_pool import ConnectionPool
from llmserve.pipeline.own_server import server_address

# The C++ backend model's metadata shapes (batch dim first), as tritonserver reports them.
INPUTS = {"input_ids": [-1, -1], "input_lengths": [-1, 1], "stop_words_list": [-1, 2, -1], "temperature": [-1, 1]}
OUTPUTS = {"output_ids": "INT32", "sequence_length": "INT32", "output_log_probs": "FP32"}


@pytest.mark.parametrize(
    "dims, count, shape",
    [
        ([-1, -1], 5, (1, 5)),  # the innermost variable dim takes the rest, the batch dim 1
        ([-1, 1], 1, (1, 1)),
        ([-1, 2, -1], 6, (1, 2, 3)),  # the flattened [1, 2, n] stop words arrive as [1, 2, n]
        ([-1, 2, -1], 5, None),  # not a multiple of the fixed dim: refused
        ([-1, 3], 6, (2, 3)),  # a fixed innermost dim: the batch dim takes the rest
    ],
)
def test_the_generate_endpoints_shaping_rule(dims, count, shape):
    assert generate_shape(dims, count) == shape


def test_values_json_cannot_carry_exactly_are_refused():
    assert flat_json(np.array([[1, 2]], np.int32)) == [1, 2]
    assert flat_json(np.array([[True]])) == [True]
    assert flat_json(np.array([[b"caf\xc3\xa9"]], dtype=object)) == ["café"]
    assert flat_json(np.array([[b"\xff"]], dtype=object)) is None  # not UTF-8
    assert flat_json(np.array([[float("nan")]], np.float32)) is None
    assert flat_json(np.array([[0.5]], np.float16)) is None


def _backend(grpc=None) -> HttpBackend:
    b = HttpBackend("127.0.0.1:1", grpc=grpc or Grpc())  # metadata known: no request reaches this address
    b._models["m"] = (dict(INPUTS), {n: triton_to_np_dtype(t) for n, t in OUTPUTS.items()})
    return b


class Grpc:
    """Stands in for backend_grpc.Backend: records what went its way."""

    def __init__(self):
        self.streams, self.stops = [], []

    def stream(self, model, inputs, outputs, request_id, parameters=None):
        self.streams.append(request_id)
        return iter(())

    def stop(self, model, request_id):
        self.stops.append(request_id)
        return True


def test_a_request_generate_can_carry_becomes_one_flat_body():
    body = HttpBackend._body(
        INPUTS,
        [
            ("input_ids", np.array([[1, 2, 3]], np.int32)),
            ("stop_words_list", np.array([[[5, 6, 0], [2, 3, -1]]], np.int32)),
            ("temperature", np.array([[0.5]], np.float32)),
        ],
        "r1",
    )
    assert json.loads(body) == {
        "id": "r1",
        "input_ids": [1, 2, 3],
        "stop_words_list": [5, 6, 0, 2, 3, -1],
        "temperature": [0.5],
    }


@pytest.mark.parametrize(
    "inputs, outputs, parameters",
    [
        ([("input_ids", np.array([[1]], np.int32))], ["output_ids", "generation_logits"], None),  # logits
        ([("input_ids", np.zeros((1, 0), np.int32))], ["output_ids"], None),  # an empty input
        ([("input_ids", np.array([[1], [2]], np.int32))], ["output_ids"], None),  # a shape it would not rebuild
        ([("not_an_input", np.array([[1]], np.int32))], ["output_ids"], None),  # gRPC answers with the error
        ([("input_ids", np.array([[1]], np.int32))], ["output_ids"], {"x": 1}),  # request parameters
    ],
)
def test_what_generate_cannot_carry_goes_over_grpc(inputs, outputs, parameters):
    grpc = Grpc()
    list(_backend(grpc).stream("m", inputs, outputs, "r1", parameters))
    assert grpc.streams == ["r1"]


# --- against a server speaking generate_stream ------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked bodies: as tritonserver answers

    def log_message(self, *args):
        pass

    def finish(self):
        super().finish()
        self.server.closed.append(self.client_address)  # the client closed the connection (or the server did)

    def do_GET(self):
        meta = {
            "inputs": [{"name": n, "datatype": "INT32", "shape": d} for n, d in INPUTS.items()],
            "outputs": [{"name": n, "datatype": t, "shape": [-1, -1]} for n, t in OUTPUTS.items()],
        }
        self._reply(200, "application/json", json.dumps(meta).encode())

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.server.connections.add(self.client_address)
        n = body["input_ids"][0]
        if n == 0:  # refused before any model saw it: a JSON body, not a stream
            return self._reply(400, "application/json", b'{"error":"unexpected inference input"}')
        self.send_response(400 if n < 0 else 200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = (
            [{"error": "in the model"}]
            if n < 0
            else [{"id": body["id"], "output_ids": i, "sequence_length": 1, "output_log_probs": -0.5} for i in range(n)]
        )
        for e in events:
            self._chunk(b"data: " + json.dumps(e).encode() + b"\n\n")
        self._chunk(b"")
        # n == 1: the server then closes the connection without saying so (the client pools it)
        self.close_connection = n == 1

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _reply(self, status, kind, body):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server():
    s = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    s.bodies, s.connections, s.closed = [], set(), []
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def _stream(backend, n, rid="r1"):
    return backend.stream("m", [("input_ids", np.array([[n]], np.int32))], ["output_ids"], rid)


def _read(response) -> dict:
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def test_a_stream_is_read_like_bls_responses_and_its_connection_serves_again(server):
    grpc = Grpc()
    backend = HttpBackend(f"127.0.0.1:{server.server_address[1]}", grpc=grpc)
    for rid in ("a", "b", "c"):
        got = list(_stream(backend, 3, rid))
        assert [r.has_error() for r in got] == [False] * 3
        assert [_read(r)["output_ids"].tolist() for r in got] == [[0], [1], [2]]
        assert _read(got[0])["output_ids"].dtype == np.int32 and _read(got[0])["output_log_probs"].dtype == np.float32
    assert [b["id"] for b in server.bodies] == ["a", "b", "c"]
    assert len(server.connections) == 1  # one keep-alive connection, given back after each stream
    assert grpc.streams == [] and grpc.stops == []


def test_errors_come_back_as_error_responses(server):
    backend = HttpBackend(f"127.0.0.1:{server.server_address[1]}", grpc=Grpc())
    (refused,) = _stream(backend, 0)
    assert refused.has_error() and refused.error().message() == "unexpected inference input"
    (failed,) = _stream(backend, -1)  # the model's first response an error: the stream's status is 400
    assert failed.has_error() and failed.error().message() == "in the model"


def test_an_abandoned_stream_is_stopped_by_id_and_drained(server):
    grpc = Grpc()
    backend = HttpBackend(f"127.0.0.1:{server.server_address[1]}", grpc=grpc)
    stream = _stream(backend, 50, "gone")
    next(stream)
    stream.close()  # the relay stopped reading (a send of its own failed)
    assert grpc.stops == ["gone"]
    assert len(list(_stream(backend, 2, "next"))) == 2
    assert len(server.connections) == 1  # drained, so the same connection served the next stream


def test_a_pooled_connection_the_server_closed_is_replaced(server):
    backend = HttpBackend(f"127.0.0.1:{server.server_address[1]}", grpc=Grpc())
    list(_stream(backend, 1))  # the server closes this connection after its answer
    assert backend.pool.idle() == 1
    assert len(list(_stream(backend, 2))) == 2  # sent again on a new connection
    assert len(server.connections) == 2


def test_an_idle_connection_is_closed_so_that_a_stopping_server_need_not_wait(server):
    """tritonserver's SIGTERM waits, up to its exit timeout, until no HTTP connection is open: the relay's
    pooled connections are closed once idle for pool.idle_close_s (the reaper thread)."""
    backend = HttpBackend(f"127.0.0.1:{server.server_address[1]}", grpc=Grpc())
    backend.pool.idle_close_s = 0.05
    list(_stream(backend, 2))
    deadline = time.monotonic() + 30  # bounds a failure only: the reaper runs every 25 ms
    while backend.pool.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert backend.pool.idle() == 0
    while not server.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(server.closed) == 1


def test_only_connections_idle_long_enough_are_closed():
    now = [100.0]
    pool = ConnectionPool(lambda: "127.0.0.1:1", idle_close_s=1.0, clock=lambda: now[0])
    old, young = Conn(), Conn()
    pool._idle = [(old, 98.5), (young, 99.6)]
    assert pool.close_idle(1.0) == 1 and old.closed and not young.closed
    assert pool.take() == (young, True) and pool.take()[1] is False  # then a new one


class Conn:
    closed = False

    def close(self):
        self.closed = True


def test_an_unreachable_http_endpoint_sends_the_request_over_grpc():
    """A stopping tritonserver resets new HTTP connections while it waits for the open ones (gRPC stays up
    meanwhile): the requests that come then go over gRPC. Also before the model's metadata was read."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    for known in (True, False):
        grpc = Grpc()
        backend = _backend(grpc) if known else HttpBackend(f"127.0.0.1:{port}", grpc=grpc)
        backend.pool = ConnectionPool(lambda: f"127.0.0.1:{port}")
        assert list(_stream(backend, 3)) == []  # (the stand-in gRPC stream has no responses)
        assert grpc.streams == ["r1"]


@pytest.mark.parametrize(
    "cmdline, address",
    [
        (["tritonserver"], "127.0.0.1:8000"),
        (["tritonserver", "--http-port=18200", "--grpc-port=18201"], "127.0.0.1:18200"),
        (["tritonserver", "--http-address", "10.0.0.5", "--http-port", "7000"], "10.0.0.5:7000"),
    ],
)
def test_the_http_address_is_read_from_the_servers_flags(cmdline, address):
    assert server_address(cmdline, "http") == address


def test_a_server_without_http_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="--allow-http=false"):
        server_address(["tritonserver", "--allow-http=false"], "http")
