"""The relay's way to the C++ backend: an ordinary gRPC client of its own server (ModelStreamInfer),
not decoupled BLS. python_backend r24.10's BLS response iterator takes the GIL back while holding its
own lock, and with several threads of one stub iterating BLS streams that deadlocks the stub under
load (docs/perf-gpu.md, "The relay's hang"; unchanged upstream). A gRPC stream's iterator waits in
grpc's C core, outside every python_backend lock, so any number of relay threads can wait at once.

`stream()` yields the backend's responses as objects with the BLS response's interface
(`has_error()`, `error().message()`, `output_tensors()` of tensors with `name()` / `as_numpy()`), so
`pb.get_output_tensor_by_name` reads them as it reads BLS responses. The server's gRPC address comes
from its own command line (a stub's parent process is tritonserver): no configuration to get wrong."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator

import grpc
import numpy as np
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

DEFAULT_PORT = 8001  # tritonserver's own default for --grpc-port
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


def server_address(cmdline: list[str]) -> str:
    """host:port of the gRPC endpoint that tritonserver started with `cmdline` listens on."""
    opts: dict[str, str] = {}
    for i, arg in enumerate(cmdline):
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            opts[key] = value
        elif arg.startswith("--") and i + 1 < len(cmdline) and not cmdline[i + 1].startswith("--"):
            opts[arg] = cmdline[i + 1]
    if opts.get("--allow-grpc", "true").lower() in ("false", "0", "off", "no"):
        raise RuntimeError(
            "the relay reaches the backend over this server's gRPC endpoint: start tritonserver without --allow-grpc=false"
        )
    host = opts.get("--grpc-address", "0.0.0.0")
    host = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    return f"{host}:{int(opts.get('--grpc-port', DEFAULT_PORT))}"


def own_server_address() -> str:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        return server_address([a.decode() for a in f.read().split(b"\0") if a])


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

    def has_error(self) -> bool:
        return bool(self._msg.error_message)

    def error(self) -> Response:
        return self

    def message(self) -> str:
        return self._msg.error_message

    def output_tensors(self) -> list[_Tensor]:
        result = InferResult(self._msg.infer_response)
        return [_Tensor(o.name, result) for o in self._msg.infer_response.outputs]


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
        self, model: str, inputs: list[tuple[str, np.ndarray]], outputs: list[str], request_id: str
    ) -> Iterator[Response]:
        """The backend's responses to one request, up to and including its final one."""
        req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        add_inputs(req, ((name, arr, np_to_triton_dtype(arr.dtype)) for name, arr in inputs))
        for name in outputs:
            req.outputs.add().name = name
        done = threading.Event()

        def requests():  # the stream stays open until the final response is read (closing it early ends it)
            yield req
            done.wait()

        call = self._connect().ModelStreamInfer(requests())
        try:
            for msg in call:
                yield Response(msg)
                if msg.error_message or is_final(msg.infer_response):
                    return
        finally:
            done.set()
            call.cancel()

    def stop(self, model: str, request_id: str, inputs: list[tuple[str, np.ndarray]]) -> bool:
        """Upstream's stop-by-id (`inputs`: cancellation.stop_arrays()); True when answered without error."""
        return not any(r.has_error() for r in self.stream(model, inputs, ["output_ids"], request_id))
