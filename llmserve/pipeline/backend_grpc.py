"""The relay's gRPC way to the C++ backend (engine.tensorrtllm.relay_transport: grpc; with http, for its
stops and what generate cannot carry: backend_http.py) and the unary twins' way to their model: an
ordinary gRPC client of its own server (ModelStreamInfer), not decoupled BLS. python_backend r24.10's BLS response iterator takes the GIL back while holding its
own lock, and with several threads of one stub iterating BLS streams that deadlocks the stub under
load (docs/perf-gpu.md, "The relay's hang"; unchanged upstream). A gRPC stream's iterator waits in
grpc's C core, outside every python_backend lock, so any number of relay threads can wait at once.

`stream()` yields the backend's responses as objects with the BLS response's interface
(`has_error()`, `error().message()`, `output_tensors()` of tensors with `name()` / `as_numpy()`), so
`pb.get_output_tensor_by_name` reads them as it reads BLS responses. The server's gRPC address comes
from its own command line (own_server.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

from .cancellation import stop_arrays
from .own_server import own_server_address

log = logging.getLogger(__name__)

# Generation logits are vocabulary-sized per token; the default 4 MiB would refuse a long non-streamed one.
MAX_MESSAGE_BYTES = 1 << 30
FINAL = "triton_final_response"


def add_inputs(req: service_pb2.ModelInferRequest, items: Iterable[tuple[str, np.ndarray, str]]) -> None:
    """Each (name, array, Triton datatype) as one input with its raw contents."""
    for name, arr, dtype in items:
        t = req.inputs.add()
        t.name, t.datatype = name, dtype
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(serialize_byte_tensor(arr).item() if dtype == "BYTES" else arr.tobytes())
    # Without this a stream whose last response carries no tensors would never say it is over.
    req.parameters["triton_enable_empty_final_response"].bool_param = True


def is_final(resp: service_pb2.ModelInferResponse) -> bool:
    final = resp.parameters.get(FINAL)
    return final is not None and final.bool_param


def stop_abandoned(backend, model: str, request_id: str) -> None:
    """A stream left before its final response: its request stopped by id (backend.stop), so the backend
    sends its final response as for any stopped request. Never raises: the request then ends by itself."""
    if not request_id:
        return
    try:
        backend.stop(model, request_id)
    except Exception as e:
        log.warning("stop %r on %s failed: %s", request_id, model, e)


def _read_to_end(call) -> None:
    """Whatever the server still sends (a stopped request's last responses), until it ends the stream."""
    try:
        for _ in call:
            pass
    except grpc.RpcError as e:  # the server went away: nothing is left to read
        log.debug("backend stream ended: %s", e.code())


class _Tensor:
    def __init__(self, name: str, result: InferResult):
        self._name, self._result = name, result

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._result.as_numpy(self._name)


class Response:
    """One streamed response, read like a BLS response."""

    def __init__(self, msg: service_pb2.ModelStreamInferResponse):
        self._msg = msg
        self._tensors: list[_Tensor] | None = None

    def has_error(self) -> bool:
        return bool(self._msg.error_message)

    def error(self) -> Response:
        return self

    def message(self) -> str:
        return self._msg.error_message

    def output_tensors(self) -> list[_Tensor]:
        # Built once: pb.get_output_tensor_by_name asks for the whole list at every lookup, and the relay
        # looks up three or four outputs of every backend response (one per token).
        if self._tensors is None:
            result = InferResult(self._msg.infer_response)
            self._tensors = [_Tensor(o.name, result) for o in self._msg.infer_response.outputs]
        return self._tensors


class Backend:
    """One channel to this server, shared by every request of the stub (grpc multiplexes the streams)."""

    def __init__(self, address: str | None = None):
        self._address = address
        self._stub = None
        self._lock = threading.Lock()

    def _connect(self):
        # At the first request, not at load: the gRPC endpoint opens only once every model is loaded.
        with self._lock:
            if self._stub is None:
                channel = grpc.insecure_channel(
                    self._address or own_server_address(),
                    options=[
                        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                    ],
                )
                self._stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            return self._stub

    def stream(
        self,
        model: str,
        inputs: list[tuple[str, np.ndarray]],
        outputs: list[str],
        request_id: str,
        parameters: dict | None = None,
    ) -> Iterator[Response]:
        """The backend's responses to one request, up to and including its final one. `parameters`:
        the request's own (a client's unknown generate keys travel on, so the model can refuse them).

        Closed before its final response (the caller stopped reading: a send of its own failed), it
        stops the request by its id and still reads the stream to its end."""
        return self._stream(model, inputs, outputs, request_id, parameters, stop_if_abandoned=True)

    def stop(self, model: str, request_id: str) -> bool:
        """Upstream's stop-by-id (cancellation.stop_arrays()); True when answered without error."""
        stream = self._stream(model, stop_arrays(), ["output_ids"], request_id, None, stop_if_abandoned=False)
        return not any(r.has_error() for r in stream)

    def _stream(self, model, inputs, outputs, request_id, parameters, stop_if_abandoned: bool) -> Iterator[Response]:
        req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        add_inputs(req, ((name, arr, np_to_triton_dtype(arr.dtype)) for name, arr in inputs))
        for name in outputs:
            req.outputs.add().name = name
        for key, value in (parameters or {}).items():
            param = req.parameters[key]
            if isinstance(value, bool):
                param.bool_param = value
            elif isinstance(value, int):
                param.int64_param = value
            elif isinstance(value, float):
                param.double_param = value
            else:
                param.string_param = str(value)
        done = threading.Event()

        def requests():  # the client's half stays open until the answer is read (closing it early ends it)
            yield req
            done.wait()

        call = self._connect().ModelStreamInfer(requests())
        answered = False
        try:
            for msg in call:
                # An error the server answers before the request reaches the model carries no final flag.
                answered = bool(msg.error_message) or is_final(msg.infer_response)
                yield Response(msg)
                if answered:
                    return
        except grpc.RpcError:  # the stream itself failed (the server went away): nothing left to stop
            answered = True
            raise
        finally:
            # The stream is never cancelled, only half-closed and read to its end (the server's OK).
            # Triton 2.51 leaks a stream that its client cancels after the request's final response
            # left the model but before it was written: its gRPC frontend then waits for a callback
            # that never comes, keeping the request, and so the model, alive; SIGTERM waits out the
            # whole exit timeout on it (docs/tensorrtllm.md). An unanswered request is stopped by id
            # instead, so the backend sends its final response as it does for any stopped request.
            done.set()
            if not answered and stop_if_abandoned:
                stop_abandoned(self, model, request_id)
            _read_to_end(call)
