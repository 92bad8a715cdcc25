"""Cancellation of a generation, for every Triton model of the `tensorrt_llm` step and postprocessing:
one poll throttle, one sender of upstream's `stop` request, one request id -> cancel registry.

Why each exists (Triton 2.51):
- `is_cancelled()` is an IPC round trip to the server, so it is asked at most once per period per
  request: the spec's engine.tensorrtllm.cancellation_check_period_ms, the period TensorRT-LLM's C++
  backend polls at, which the generator writes into each model's config parameters (`PollThrottle`).
- Triton flags a cancelled ensemble request only on the steps it schedules after the cancel (core's
  ensemble scheduler; server#6739): the running tensorrt_llm step never sees it, but the next
  postprocessing step does, since each streamed tensorrt_llm response spawns one. So postprocessing
  relays it (`CancelRelay`): a BLS request with `stop` true whose request id is the request's key
  (below) makes tensorrt_llm cancel that generation (upstream's cancel-by-id, which the TensorRT-LLM
  backend implements too). The step itself is then answered as usual, never with an
  error: an error from one ensemble step while another (tensorrt_llm) is still in flight leaves the
  ensemble request in flight in Triton for good, and every later SIGTERM waits the whole exit timeout
  (docs/cancellation.md). The relay sends the same request to the C++ backend (`send_stop`).
- A `stop` request names the requests to cancel by their Triton request id; `CancelRegistry` maps an
  id to the cancel hooks of the requests that carry it (handleStopRequest in the C++ backend).
- A client need not set a request id, so every ensemble request gets a key that a stop can name
  (contract.REQUEST_KEY): preprocessing, the first step to see it, sets it to the client's request id
  or mints a unique one (`edge_key`); tensorrt_llm registers the generation under it (`request_key`)
  and echoes it with every response; postprocessing reads it back from its step's inputs.

CancelRelay's conditions: the request streams (a non-streaming request has no postprocessing step
until it is done), and postprocessing runs without dynamic batching (with it, Triton's scheduler
answers the flagged request CANCELLED before execute; the generator renders postprocessing that way
when it has one instance; docs/cancellation.md).

`pb` is triton_python_backend_utils, passed in by the model.py adapters."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..contract import ENGINE, ENGINE_INPUTS, REQUEST_KEY, STOP_REQUEST, by_name
from ..request.reader import Reader, one

log = logging.getLogger(__name__)

_ENGINE_INPUTS = by_name(ENGINE_INPUTS)
MAX_TRACKED = 4096  # request ids remembered per throttle; older ones are forgotten first

# The C++ backend's answer to a `stop` without a request id (the relay and the stand-in give the same).
NO_REQUEST_ID = "Trying to stop a request but request ID is not provided"
MINTED_PREFIX = "llmserve-"


def edge_key(request_id: str) -> str:
    """preprocessing: the key of a new request: the client's request id (a client, or the OpenAI
    frontend, may send `stop` with it), or a fresh unique one when the client set none."""
    return request_id or f"{MINTED_PREFIX}{uuid.uuid4().hex}"


def key_tensor(key: str) -> np.ndarray:
    return np.array([[key.encode("utf-8")]], dtype=np.object_)


def request_key(read: Reader, request_id: str) -> str:
    """tensorrt_llm and postprocessing: the request's key: its request_key input when it has one
    (inside the ensemble), else its Triton request id (a token-level client's own). A malformed key is
    the client's error (RequestError)."""
    return one(read, REQUEST_KEY, str) or request_id


class PollThrottle:
    """Says when an expensive check (is_cancelled()) is due again: at most once per `period_s` per key.

    `due(key)` is True at a key's first call, then again once `period_s` has passed since the last
    True. `start(key)` counts a period from now instead (no check before the first period is over).
    The least recently started keys are forgotten beyond `max_keys`, so finished requests never leak."""

    def __init__(self, period_s: float, max_keys: int = MAX_TRACKED, clock: Callable[[], float] = time.monotonic):
        self.period_s, self.max_keys, self.clock = period_s, max_keys, clock
        self._last: dict[str, float] = {}

    @classmethod
    def from_ms(cls, period_ms: float, **kw) -> PollThrottle:
        return cls(period_ms / 1000, **kw)

    def start(self, key: str = "") -> None:
        self._mark(key, self.clock())

    def due(self, key: str = "") -> bool:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.period_s:
            return False
        self._mark(key, now)
        return True

    def forget(self, key: str = "") -> None:
        self._last.pop(key, None)

    def _mark(self, key: str, now: float) -> None:
        remember(self._last, key, now, self.max_keys)

    def __len__(self) -> int:
        return len(self._last)


def remember(recent: dict, key: str, value, max_keys: int = MAX_TRACKED) -> None:
    """recent[key] = value, as the most recent entry; beyond max_keys the older half is forgotten."""
    recent.pop(key, None)  # re-inserted last: the dict's order is the order of use
    recent[key] = value
    if len(recent) > max_keys:
        for k in list(recent)[: len(recent) - max_keys // 2]:
            del recent[k]


def stop_arrays() -> list[tuple[str, np.ndarray]]:
    """Upstream's `stop` request: stop true plus the inputs every request must carry (their values
    are ignored)."""
    return [(name, np.full((1, 1), value, _ENGINE_INPUTS[name].np_dtype)) for name, value in STOP_REQUEST.items()]


def stop_inputs(pb) -> list:
    return [pb.Tensor(name, arr) for name, arr in stop_arrays()]


def send_stop(pb, model: str, request_id: str) -> bool:
    """Ask `model` over BLS to cancel the requests with `request_id` (answered by an empty final
    response). Never raises: a stop that fails leaves the generation to end by itself. True if sent
    without error."""
    try:
        bls = pb.InferenceRequest(
            model_name=model, inputs=stop_inputs(pb), request_id=request_id, requested_output_names=["output_ids"]
        )
        ok = True
        for response in bls.exec(decoupled=True):
            if response.has_error():
                log.warning("stop %r on %s: %s", request_id, model, response.error().message())
                ok = False
        return ok
    except Exception as e:
        log.warning("stop %r on %s failed: %s", request_id, model, e)
        return False


class CancelRegistry:
    """Triton request id -> the cancel hooks of the requests that carry it. Thread-safe; an empty id
    is never registered (a `stop` cannot name it)."""

    def __init__(self):
        self._by_id: dict[str, set[Callable[[], object]]] = {}
        self._lock = threading.Lock()

    def add(self, request_id: str, cancel: Callable[[], object]) -> None:
        if request_id:
            with self._lock:
                self._by_id.setdefault(request_id, set()).add(cancel)

    def remove(self, request_id: str, cancel: Callable[[], object]) -> None:
        with self._lock:
            hooks = self._by_id.get(request_id)
            if hooks is not None:
                hooks.discard(cancel)
                if not hooks:
                    del self._by_id[request_id]

    @contextmanager
    def registered(self, request_id: str, cancel: Callable[[], object]) -> Iterator[None]:
        self.add(request_id, cancel)
        try:
            yield
        finally:
            self.remove(request_id, cancel)

    def stop(self, request_id: str) -> int:
        """A `stop` request: run the cancel hooks of every request with this id (outside the lock) and
        return how many. An unknown id is not an error (its request may have finished already); a
        missing one is (ValueError, the C++ backend's message)."""
        if not request_id:
            raise ValueError(NO_REQUEST_ID)
        with self._lock:
            hooks = list(self._by_id.get(request_id, ()))
        for cancel in hooks:
            cancel()
        return len(hooks)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)


class CancelRelay:
    """Postprocessing's side: a step of a cancelled ensemble request stops its generation."""

    def __init__(self, pb, period_s: float, engine_model: str = ENGINE, clock: Callable[[], float] = time.monotonic):
        self.pb, self.engine_model = pb, engine_model
        self.polls = PollThrottle(period_s, clock=clock)
        self.stopped: dict[str, None] = {}  # request ids whose stop was sent (bounded, like the polls)

    def cancelled(self, request, read: Reader) -> bool:
        """True if this step's ensemble request was cancelled (and the stop has been sent)."""
        try:
            key = request_key(read, request.request_id())
        except Exception:  # a malformed key from a direct caller: its request id, as without one
            key = request.request_id()
        if not key:
            return False
        if key in self.stopped:
            return True
        if not self.polls.due(key) or not request.is_cancelled():
            return False
        remember(self.stopped, key, None)
        send_stop(self.pb, self.engine_model, key)
        return True
