"""Helpers the model.py adapters share. The Triton utils module is passed in (`pb`), so the
package itself never imports triton_python_backend_utils."""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading

import numpy as np

from ..errors import kind_of, triton_error
from ..finish import FinishReason
from ..logs import Throttle

log = logging.getLogger(__name__)
_throttle = Throttle(60.0)  # one traceback per minute per distinct send failure; the others are counted


def parameters(args: dict) -> dict[str, str]:
    cfg = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}


def reader(request):
    """A request's inputs by name, listed once: pb.get_input_tensor_by_name lists every input of the
    request again (a Python object each) for each name it is asked, and a request reads 30-40 names,
    most of them absent (the sampling options). From the ensemble, `tensorrt_llm` gets 10-15 inputs a
    request: the scans were 40 % of its parsing in a py-spy profile on the 2-core CPU (docs/PERFORMANCE.md)."""
    inputs = {t.name(): t for t in request.inputs()}

    def read(name: str):
        t = inputs.get(name)
        return None if t is None else t.as_numpy()

    return read


def tensors(pb, outputs: dict[str, np.ndarray], wanted: set[str] | None = None) -> list:
    """Output tensors; with `wanted` (the request's requested_output_names()), only those.

    A decoupled model must never hand `response_sender.send()` a tensor the client did not ask
    for. Triton 2.51's stub (python_backend r24.10, ResponseSender::Send) releases the GIL, then
    drops the unrequested tensors, and with them their numpy arrays, without the GIL. On a
    Python 3.12 stub that is a segfault at address 0x10 in libpython3.12 (3.12 frees objects
    through the thread state, which a thread without the GIL does not have); 3.11 happens to
    survive. Upstream fixed it in python_backend #390 (r24.12). Returned (non-decoupled)
    responses are pruned with the GIL held and are safe either way."""
    return [pb.Tensor(name, value) for name, value in outputs.items() if not wanted or name in wanted]


def failure_code(pb, failure: FinishReason):
    """How a request the engine could not finish is answered."""
    return {FinishReason.CANCELLED: pb.TritonError.CANCELLED, FinishReason.TIMEOUT: pb.TritonError.UNAVAILABLE}.get(
        failure, pb.TritonError.INTERNAL
    )


class SendQueue:
    """Sends decoupled responses on threads of their own, so the engine thread never waits for
    `response_sender.send()`, an IPC round trip to the server (hundreds of microseconds: at 64
    streams it tripled the engine step inside Triton, docs/perf-gpu.md). Each request's responses
    go through one thread, in order; requests are spread over `threads` threads.

    `max_pending` > 0 bounds the responses queued and not yet sent: a caller that would exceed it waits
    for a send to finish (backpressure for a producer that never coalesces, the stand-in: without it a
    fast engine queues responses without limit and every stream's latency grows with the backlog).
    0: unbounded (the torch engine holds tokens back itself while a stream's response waits)."""

    def __init__(self, threads: int, max_pending: int = 0):
        self._room = threading.Semaphore(max_pending) if max_pending > 0 else None
        self._queues = [queue.SimpleQueue() for _ in range(threads)]
        self._next = itertools.count()
        self._threads = [
            threading.Thread(target=self._run, args=(q,), name=f"llmserve-send-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for t in self._threads:
            t.start()

    def lane(self) -> queue.SimpleQueue:
        return self._queues[next(self._next) % len(self._queues)]

    def put(self, lane: queue.SimpleQueue, job) -> None:
        """Queue `job` on `lane`; with max_pending, wait while that many are queued."""
        if self._room is not None:
            self._room.acquire()
        lane.put(job)

    def _run(self, q: queue.SimpleQueue) -> None:
        while (job := q.get()) is not None:
            try:
                job()
            finally:
                if self._room is not None:
                    self._room.release()

    def close(self, timeout_s: float = 10) -> None:
        """Send what is queued, then stop the threads."""
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(timeout=timeout_s)


class StreamSender:
    """The responses of one decoupled request: `send(outputs or None, final, failure or None,
    message or None)`, callable from any thread (the engine's). Takes what it needs from the
    request now: a request is not read after execute() returns.

    With a SendQueue the call only queues the response; `backlogged()` says a response is still
    waiting to go out, so the caller can hold further tokens back and send them together with the
    next one (coalescing that follows the load), and a send that fails (the client is gone) makes
    `is_cancelled()` true, so the engine frees the request at its next cancellation poll."""

    def __init__(self, pb, request, sends: SendQueue | None = None):
        self.pb = pb
        self.sender = request.get_response_sender()
        self.wanted = set(request.requested_output_names())
        self.request_id = request.request_id() or None  # for the log line of a failed send
        self._sends = sends
        self._lane = sends.lane() if sends is not None else None  # this request's send thread
        # Responses handed over (written by the caller's thread only) and sent (by the send thread only).
        self._handed = self._sent = 0
        self._failed = False
        # is_cancelled() may run on another thread (the engine's cancellation poller) than the final
        # send: once the final response is out, Triton frees the request's response factory, which
        # is_cancelled() would then ask about; the lock orders the two and `_closed` stops the asking.
        self._final_lock = threading.Lock()
        self._closed = False

    def __call__(self, outputs, final: bool, failure: FinishReason | None = None, message: str | None = None) -> None:
        if self._sends is None:
            return self._send(outputs, final, failure, message)
        self._handed += 1
        self._sends.put(self._lane, lambda: self._send_queued(outputs, final, failure, message))

    def _send_queued(self, outputs, final, failure, message) -> None:
        try:
            if not self._failed:
                self._send(outputs, final, failure, message)
        except Exception as e:  # the engine cancels the request at its next poll; the log says why
            self._failed = True
            _throttle.exception(
                log,
                e,
                "sending a response failed; the request is cancelled",
                level=logging.WARNING,
                request_id=self.request_id,
            )
        finally:
            self._sent += 1

    def _send(self, outputs, final: bool, failure: FinishReason | None, message: str | None) -> None:
        if final:
            with self._final_lock:
                self._closed = True
                return self._send_now(outputs, final, failure, message)
        self._send_now(outputs, final, failure, message)

    def _send_now(self, outputs, final: bool, failure: FinishReason | None, message: str | None) -> None:
        pb = self.pb
        flags = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
        if failure is not None:
            self.sender.send(
                pb.InferenceResponse(error=pb.TritonError(message, failure_code(pb, failure))), flags=flags
            )
        elif outputs is None:
            self.sender.send(flags=flags)
        else:
            self.sender.send(pb.InferenceResponse(output_tensors=tensors(pb, outputs, self.wanted)), flags=flags)

    def backlogged(self) -> bool:
        return self._handed > self._sent

    def fail(self, error: Exception) -> None:
        """The request is refused before it reaches the engine."""
        with self._final_lock:
            self._closed = True
            self.sender.send(error_response(self.pb, error), flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def is_cancelled(self) -> bool:
        """Whether the client is gone; never asked of Triton once the final response went out."""
        if self._failed:
            return True
        with self._final_lock:
            return not self._closed and self.sender.is_cancelled()


def error_response(pb, error: Exception):
    """An exception -> an error response whose code says its kind (errors.TRITON_CODE): a RequestError
    INVALID_ARG (HTTP 400 / gRPC INVALID_ARGUMENT); a full engine queue or an engine that cannot serve
    UNAVAILABLE (HTTP 503: retry elsewhere); anything else INTERNAL."""
    return pb.InferenceResponse(error=triton_error(pb, str(error), kind_of(error)))
