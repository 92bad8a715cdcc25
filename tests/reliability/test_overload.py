"""Overload: ten times the concurrency the server can hold (engine slots + the spec's queue). Requests
beyond the queue are rejected quickly with a clear "busy" error (HTTP 503/429, gRPC UNAVAILABLE /
RESOURCE_EXHAUSTED), accepted ones complete correctly, memory stays bounded, the server stays ready
and serves at once when the load drops."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from llmserve.client import wire
from llmserve.contract import ENSEMBLE, UNARY_SUFFIX

from .conftest import MAX_BATCH, QUEUE, rss_kb, wait_metric

pytestmark = pytest.mark.e2e


@pytest.fixture
def overload_server(capacity_server):
    """A request timeout far above the time a queued request can wait here (ten times the service
    time of the whole burst), so "busy" is the only refusal under overload."""
    return capacity_server


CAPACITY = MAX_BATCH + QUEUE
LOAD = 10 * CAPACITY
TOKENS = 400  # about 0.5-1 s per request on the tiny model: the burst overlaps for seconds
BUSY_HTTP = (429, 503)
BUSY_GRPC = ("StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED")
BUSY_WORDS = ("busy", "queue", "capacity", "overload", "exceed")


def _post(http: str) -> tuple[int, float, str]:
    t0 = time.monotonic()
    try:
        r = requests.post(
            f"http://{http}/v2/models/ensemble/generate",
            json={"text_input": "Tell a story", "max_tokens": TOKENS, "min_tokens": TOKENS},
            timeout=120,
        )
        status = r.status_code
        # Triton's generate endpoint answers every model error with 400, whatever its code; the engine
        # marks a full queue "server busy" and Triton's own queue says "Exceeds maximum queue size" (both
        # UNAVAILABLE); our HAProxy turns them into 503.
        if status == 400 and ("server busy" in r.text or "Exceeds maximum queue size" in r.text):
            status = 503
        return status, time.monotonic() - t0, r.text
    except requests.RequestException as e:
        return -1, time.monotonic() - t0, repr(e)


def test_http_overload_sheds_fast_and_recovers(overload_server, emit):
    http = overload_server.http
    wait_metric(overload_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=30)
    rss0 = rss_kb(overload_server.process.proc.pid)
    ready_fail, stop = [], threading.Event()

    def watch_ready():
        while not stop.wait(0.2):
            try:
                if requests.get(f"http://{http}/v2/health/ready", timeout=2).status_code != 200:
                    ready_fail.append(time.monotonic())
            except requests.RequestException:
                ready_fail.append(time.monotonic())

    watcher = threading.Thread(target=watch_ready, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(LOAD) as pool:
        results = list(pool.map(lambda _: _post(http), range(LOAD)))
    burst_s = time.monotonic() - t0
    stop.set()
    watcher.join()
    rss1 = rss_kb(overload_server.process.proc.pid)

    ok = [r for r in results if r[0] == 200]
    busy = [r for r in results if r[0] in BUSY_HTTP]
    other = [r for r in results if r[0] not in (200, *BUSY_HTTP)]
    p = lambda xs, q: (sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan"))  # noqa: E731
    emit(
        f"overload HTTP: {LOAD} concurrent (capacity {CAPACITY} = {MAX_BATCH} slots + queue {QUEUE}), "
        f"burst {burst_s:.1f} s: {len(ok)} ok (p50 {p([r[1] for r in ok], 0.5):.2f} s), {len(busy)} busy "
        f"(p50 {p([r[1] for r in busy], 0.5):.3f} s, p95 {p([r[1] for r in busy], 0.95):.3f} s), "
        f"{len(other)} other; RSS {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MB; "
        f"busy message: {busy[0][2][:120] if busy else '-'}"
    )
    assert not other, [(s, t[:200]) for s, _, t in other[:5]]
    assert len(ok) >= MAX_BATCH
    assert all('"text_output"' in t for _, _, t in ok)
    assert busy, f"no request was shed at {LOAD} concurrent requests for capacity {CAPACITY}"
    # "Fast" relative to service, not in absolute seconds (timed asserts flake on a busy 2-core CI
    # machine): a refusal must come back well before a served request does. Absolute figures are
    # printed above and recorded in docs/PERFORMANCE.md.
    ok_p50 = p([r[1] for r in ok], 0.5)
    assert p([r[1] for r in busy], 0.5) < ok_p50 / 2, "busy rejections must be much faster than service"
    assert all(any(w in t.lower() for w in BUSY_WORDS) for _, _, t in busy), busy[0][2]
    assert not ready_fail, f"server not ready {len(ready_fail)} times during the burst"
    assert rss1 < rss0 * 1.5 + 200 * 1024, f"RSS grew from {rss0} to {rss1} kB"
    # Recovery: the next request is served at once.
    t1 = time.monotonic()
    r = requests.post(
        f"http://{http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 2}, timeout=30
    )
    assert r.status_code == 200 and time.monotonic() - t1 < ok_p50, (r.status_code, r.text[:200])


def test_grpc_overload_sheds_with_unavailable(overload_server, emit):
    """The same burst over gRPC ModelInfer (ensemble_unary): rejections are UNAVAILABLE or
    RESOURCE_EXHAUSTED, never INTERNAL."""
    wait_metric(overload_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=30)

    def one(_):
        client = grpcclient.InferenceServerClient(overload_server.grpc)
        inputs = wire.infer_inputs(wire.ensemble_body("Tell a story", TOKENS, min_tokens=TOKENS))
        t0 = time.monotonic()
        try:
            client.infer(ENSEMBLE + UNARY_SUFFIX, inputs, client_timeout=120)
            return "ok", time.monotonic() - t0, ""
        except InferenceServerException as e:
            return str(e.status()), time.monotonic() - t0, e.message()
        finally:
            client.close()

    with ThreadPoolExecutor(LOAD) as pool:
        results = list(pool.map(one, range(LOAD)))
    codes = {}
    for code, _, _ in results:
        codes[code] = codes.get(code, 0) + 1
    busy = [r for r in results if r[0] in BUSY_GRPC]
    emit(f"overload gRPC: {LOAD} concurrent -> {codes}; busy message: {busy[0][2][:120] if busy else '-'}")
    assert set(codes) <= {"ok", *BUSY_GRPC}, [r for r in results if r[0] not in ("ok", *BUSY_GRPC)][:3]
    assert codes.get("ok", 0) >= MAX_BATCH
    assert busy, "nothing was shed"
    assert requests.get(f"http://{overload_server.http}/v2/health/ready", timeout=5).status_code == 200
