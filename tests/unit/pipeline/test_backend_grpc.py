"""The relay's gRPC way to the backend: the address comes from tritonserver's own command line, and each
stream ends by the client closing its side, never by a cancel."""

import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from llmserve.pipeline.backend_grpc import FINAL, Backend, is_final
from llmserve.pipeline.own_server import server_address


@pytest.mark.parametrize(
    "cmdline, address",
    [
        (["tritonserver", "--model-repository=/m"], "127.0.0.1:8001"),  # tritonserver's defaults
        (["tritonserver", "--grpc-port=18201", "--http-port=18200"], "127.0.0.1:18201"),
        (["tritonserver", "--grpc-port", "9001", "--model-repository", "/m"], "127.0.0.1:9001"),
        (["tritonserver", "--grpc-address=10.0.0.5", "--grpc-port=7001"], "10.0.0.5:7001"),
        (["tritonserver", "--grpc-address", "0.0.0.0"], "127.0.0.1:8001"),
    ],
)
def test_the_address_is_read_from_the_servers_flags(cmdline, address):
    assert server_address(cmdline) == address


def test_a_server_without_grpc_is_refused_with_the_reason():
    with pytest.raises(RuntimeError, match="--allow-grpc=false"):
        server_address(["tritonserver", "--allow-grpc=false"])


# --- the stream's end: half-closed and read to the end, never cancelled ----------------------------------
# Triton 2.51 leaks a stream that its client cancels in the moment the request's final response left the
# model (the model then stays loaded through a SIGTERM's whole exit timeout), so the client never cancels.


class Model(service_pb2_grpc.GRPCInferenceServiceServicer):
    """A decoupled model behind ModelStreamInfer, as Triton's gRPC frontend streams it: one response per
    token until its `tokens` are out or a `stop` names its id, then the final one. Each stream's end is
    recorded: "half-closed" when the client closed its side and read everything, else "cancelled"."""

    def __init__(self, tokens: int = 3, error: str | None = None):
        self.tokens, self.error = tokens, error
        self.ends: list[tuple[str, str]] = []
        self.stops: list[str] = []
        self.stopped: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def ModelStreamInfer(self, requests, context):
        req = next(requests)
        end = "cancelled"
        try:
            yield from self._answer(req)
            list(requests)  # returns when the client closes its side (raises if it cancels)
            end = "half-closed"
        finally:
            with self.lock:
                self.ends.append((req.id, end))

    def _answer(self, req):
        if self.error:
            yield service_pb2.ModelStreamInferResponse(
                error_message=self.error
            )  # no final flag: never reached the model
            return
        if any(t.name == "stop" for t in req.inputs):
            self.stops.append(req.id)
            self.stopped.setdefault(req.id, threading.Event()).set()
            yield _response(req.id, final=True)
            return
        stopped = self.stopped.setdefault(req.id, threading.Event())
        for _ in range(self.tokens):
            if stopped.wait(0.01):
                break
            yield _response(req.id, final=False)
        yield _response(req.id, final=True)


def _response(request_id: str, final: bool) -> service_pb2.ModelStreamInferResponse:
    msg = service_pb2.ModelStreamInferResponse()
    msg.infer_response.id = request_id
    msg.infer_response.parameters[FINAL].bool_param = final
    return msg


@pytest.fixture
def serve():
    servers = []

    def start(model: Model) -> Backend:
        server = grpc.server(futures.ThreadPoolExecutor(8))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(model, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return Backend(f"127.0.0.1:{port}")

    yield start
    for server in servers:
        server.stop(grace=None)


def _ends(model: Model, n: int) -> list[tuple[str, str]]:
    # The server records a stream's end after the client saw it: wait for the record, not for a time.
    deadline = time.monotonic() + 30
    while len(model.ends) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(model.ends)


INPUTS = [("input_ids", np.array([[1, 2]], dtype=np.int32))]


def test_a_stream_read_to_its_final_response_is_closed_not_cancelled(serve):
    model = Model(tokens=3)
    responses = list(serve(model).stream("m", INPUTS, ["output_ids"], "r1"))
    assert [is_final(r._msg.infer_response) for r in responses] == [False, False, False, True]
    assert _ends(model, 1) == [("r1", "half-closed")]


def test_a_stream_left_early_stops_its_request_and_is_still_read_to_its_end(serve):
    model = Model(tokens=10_000)  # runs until stopped
    stream = serve(model).stream("m", INPUTS, ["output_ids"], "r2")
    next(stream)
    stream.close()  # the relay's send failed
    assert model.stops == ["r2"]
    assert _ends(model, 2) == [("r2", "half-closed"), ("r2", "half-closed")]  # the request's and the stop's


def test_an_error_answered_before_the_model_ends_the_stream(serve):
    model = Model(error="Request for unknown model: 'm' is not found")
    (response,) = serve(model).stream("m", INPUTS, ["output_ids"], "r3")
    assert response.has_error() and "unknown model" in response.error().message()
    assert _ends(model, 1) == [("r3", "half-closed")] and model.stops == []
