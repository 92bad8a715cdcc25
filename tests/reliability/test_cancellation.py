"""A client that disconnects mid-stream (HTTP SSE closed) or cancels its gRPC stream frees its engine
slot: llmserve_requests_running drops and llmserve_requests_cancelled_total moves (the timed-out
counter does not), on Triton 2.51, both on `tensorrt_llm` directly and through the `ensemble`.

Through the ensemble it takes a relay (pipeline/cancellation.py): Triton 2.51 never flags the running
tensorrt_llm step (server#6739), but the next postprocessing step sees the cancel and sends
tensorrt_llm a `stop` naming the request's key: the client's request id, or the one preprocessing
minted when the client set none (both are tested; docs/cancellation.md).

The bound is relative to what is measured: the cancel reaches the engine within a few inter-token
intervals (the next chunk is where Triton notices, then one postprocessing step, then the next
engine step), plus the metric publication period (0.5 s), plus 1 s. The intervals are measured on
the stream itself, so a loaded machine widens the bound instead of failing the test.

A non-streaming /generate client that hangs up is not noticed (Triton's HTTP frontend sees a closed
connection only when it writes, server#7077, and there is nothing to write until the end): the
generation runs to its end or to serving.request_timeout_s. test_http_unary_disconnect_runs_on
documents that."""

from __future__ import annotations

import json
import queue
import time
import uuid

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from llmserve.client import wire
from llmserve.contract import ENSEMBLE

from .conftest import CAPACITY_TIMEOUT_S, EVENT_TIMEOUT_S, MAX_OUT, long_request, metric, wait_metric

pytestmark = pytest.mark.e2e
RUNNING, CANCELLED, TIMED_OUT = (
    "llmserve_requests_running",
    "llmserve_requests_cancelled_total",
    "llmserve_requests_timed_out_total",
)
METRIC_PERIOD_S = 0.5
TIMEOUT_S = CAPACITY_TIMEOUT_S  # far above any cancellation bound: a slot freed by the timeout cannot pass for a cancel


@pytest.fixture(params=["engine-thread", "engine-process"])
def cancel_server(request):
    """Each cancellation path with the engine on the stub's thread and in a process of its own
    (engine.torch.engine_process: the stub asks is_cancelled() and passes `stop`s on to it)."""
    return request.getfixturevalue("capacity_server" if request.param == "engine-thread" else "process_capacity_server")


def _idle(server):
    ok, _ = wait_metric(server, RUNNING, lambda v: v == 0, timeout_s=TIMEOUT_S + 10)
    assert ok, "engine still busy from an earlier test"


def _bound(gaps: list[float]) -> float:
    itl = sorted(gaps)[len(gaps) // 2] if gaps else 0.05
    return 1.0 + METRIC_PERIOD_S + 10 * itl


def _check(server, emit, what: str, dt: float, bound: float, c0: float, t0: float, freed: bool):
    counted, _ = wait_metric(server, CANCELLED, lambda v: v > c0, timeout_s=EVENT_TIMEOUT_S)
    timed_out = metric(server, TIMED_OUT) - t0
    emit(
        f"{what} -> llmserve_requests_running back to 0 after {dt:.2f} s (bound {bound:.2f} s from the "
        f"measured inter-token time); cancelled_total +{metric(server, CANCELLED) - c0:.0f}, "
        f"timed_out_total +{timed_out:.0f}"
    )
    assert freed and dt <= bound, f"slot held {dt:.2f} s after the cancel (bound {bound:.2f} s)"
    assert counted, "the slot was freed but llmserve_requests_cancelled_total did not move"
    assert timed_out == 0


def _grpc_stream(server, model: str, inputs, request_id: str):
    client = grpcclient.InferenceServerClient(server.grpc)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((time.monotonic(), result, error)))
    client.async_stream_infer(model, inputs, **({"request_id": request_id} if request_id else {}))
    times = []
    for _ in range(8):
        t, result, error = got.get(timeout=60)
        assert error is None, error
        times.append(t)
    return client, [b - a for a, b in zip(times, times[1:])]


def _inputs(pairs):
    return [grpcclient.InferInput(n, list(v.shape), d).set_data_from_numpy(v) for n, v, d in pairs]


def test_grpc_stream_cancel_on_token_model_frees_slot(cancel_server, emit):
    _idle(cancel_server)
    c0, t0 = metric(cancel_server, CANCELLED), metric(cancel_server, TIMED_OUT)
    inputs = _inputs(
        (
            ("input_ids", np.array([[1, 2, 3]], dtype=np.int32), "INT32"),
            ("input_lengths", np.array([[3]], dtype=np.int32), "INT32"),
            ("request_output_len", np.array([[MAX_OUT]], dtype=np.int32), "INT32"),
            ("min_tokens", np.array([[MAX_OUT]], dtype=np.int32), "INT32"),
            ("streaming", np.array([[True]], dtype=bool), "BOOL"),
        )
    )
    client, gaps = _grpc_stream(cancel_server, "tensorrt_llm", inputs, str(uuid.uuid4()))
    assert wait_metric(cancel_server, RUNNING, lambda v: v >= 1, timeout_s=EVENT_TIMEOUT_S)[0]
    client.stop_stream(cancel_requests=True)
    freed, dt = wait_metric(cancel_server, RUNNING, lambda v: v == 0, timeout_s=30)
    client.close()
    _check(cancel_server, emit, "gRPC stream cancel on tensorrt_llm", dt, _bound(gaps), c0, t0, freed)


@pytest.mark.parametrize("with_id", [True, False], ids=["request-id", "no-request-id"])
def test_grpc_stream_cancel_through_the_ensemble_frees_slot(cancel_server, emit, with_id):
    _idle(cancel_server)
    c0, t0 = metric(cancel_server, CANCELLED), metric(cancel_server, TIMED_OUT)
    req = long_request()
    inputs = wire.infer_inputs({**req, "stream": True})
    client, gaps = _grpc_stream(cancel_server, ENSEMBLE, inputs, f"cancel-{uuid.uuid4()}" if with_id else "")
    assert wait_metric(cancel_server, RUNNING, lambda v: v >= 1, timeout_s=EVENT_TIMEOUT_S)[0]
    client.stop_stream(cancel_requests=True)  # gRPC cancel of the bidirectional stream
    freed, dt = wait_metric(cancel_server, RUNNING, lambda v: v == 0, timeout_s=30)
    client.close()
    _check(
        cancel_server,
        emit,
        f"gRPC stream cancel through the ensemble ({'' if with_id else 'no '}request id)",
        dt,
        _bound(gaps),
        c0,
        t0,
        freed,
    )


@pytest.mark.parametrize("with_id", [True, False], ids=["id", "no-id"])
def test_http_sse_disconnect_through_the_ensemble_frees_slot(cancel_server, emit, with_id):
    _idle(cancel_server)
    c0, t0 = metric(cancel_server, CANCELLED), metric(cancel_server, TIMED_OUT)
    r = requests.post(
        f"http://{cancel_server.http}/v2/models/{ENSEMBLE}/generate_stream",
        json={**long_request(), "stream": True, **({"id": f"sse-{uuid.uuid4()}"} if with_id else {})},
        stream=True,
        timeout=60,
    )
    assert r.status_code == 200
    times, lines = [], r.iter_lines()  # (kept: dropping the iterator would close the connection early)
    for line in lines:
        if line.startswith(b"data:"):
            assert "text_output" in json.loads(line[5:]), line
            times.append(time.monotonic())
            # Read on until the engine's gauge shows the stream (published every 0.5 s).
            if len(times) >= 8 and metric(cancel_server, RUNNING) >= 1:
                break
    r.close()  # the client goes away mid-stream
    freed, dt = wait_metric(cancel_server, RUNNING, lambda v: v == 0, timeout_s=30)
    _check(
        cancel_server,
        emit,
        f"HTTP SSE disconnect through the ensemble ({'' if with_id else 'no '}id)",
        dt,
        _bound([b - a for a, b in zip(times, times[1:])]),
        c0,
        t0,
        freed,
    )


def test_http_unary_disconnect_runs_on(capacity_server, emit):
    """Documented limit: a non-streaming generate whose client hangs up runs to its end (or to
    serving.request_timeout_s); it is not counted as cancelled. (Triton's HTTP frontend, whichever
    process the engine runs in: one server only.)"""
    cancel_server = capacity_server
    _idle(cancel_server)
    c0, f0 = metric(cancel_server, CANCELLED), metric(cancel_server, "llmserve_requests_finished_total")
    tokens = MAX_OUT  # ~5 s on an idle machine, far beyond the client's 0.5 s (400 tokens once finished within it)
    with pytest.raises(requests.Timeout):
        requests.post(
            f"http://{cancel_server.http}/v2/models/{ENSEMBLE}/generate",
            timeout=0.5,
            json={"text_input": "Count", "max_tokens": tokens, "min_tokens": tokens, "id": "hang-up"},
        )
    finished, dt = wait_metric(
        cancel_server, "llmserve_requests_finished_total", lambda v: v > f0, timeout_s=TIMEOUT_S + 10
    )
    emit(
        f"HTTP generate client gone after 0.5 s: the {tokens}-token generation ran on and finished "
        f"{dt:.2f} s later; cancelled_total +{metric(cancel_server, CANCELLED) - c0:.0f}"
    )
    assert finished and metric(cancel_server, CANCELLED) == c0


def test_server_ready_after_cancellations(cancel_server):
    r = requests.post(
        f"http://{cancel_server.http}/v2/models/ensemble/generate",
        json={"text_input": "hi", "max_tokens": 2},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert requests.get(f"http://{cancel_server.http}/v2/health/ready", timeout=5).status_code == 200
