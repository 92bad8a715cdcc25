"""serving.request_timeout_s: a request still generating after that long is cancelled and answered
with an error, and its engine slot is freed (the spec here sets 3 s)."""

from __future__ import annotations

import json
import time

import pytest
import requests

from .conftest import TIMEOUT_S, long_request, metric, wait_metric

pytestmark = pytest.mark.e2e


def test_request_timeout_cancels_generation(small_server, emit):
    wait_metric(small_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=30)
    t0 = time.monotonic()
    r = requests.post(f"http://{small_server.http}/v2/models/ensemble/generate", json=long_request(),
                      timeout=TIMEOUT_S + 30)
    elapsed = time.monotonic() - t0
    emit(f"request_timeout_s={TIMEOUT_S}: answered {r.status_code} after {elapsed:.2f} s: {r.text[:160]}")
    assert r.status_code != 200, f"a request past its timeout was answered normally after {elapsed:.1f} s"
    assert "time" in r.json().get("error", "").lower(), r.text[:300]
    assert elapsed <= TIMEOUT_S + 1.5
    freed, dt = wait_metric(small_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=10)
    assert freed and dt <= 1.5


def test_request_timeout_streaming(small_server, emit):
    """A stream past its timeout ends with an error event (under HTTP 200: Triton has already sent its status line)."""
    wait_metric(small_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=30)
    t0 = time.monotonic()
    r = requests.post(f"http://{small_server.http}/v2/models/ensemble/generate_stream", json=long_request(),
                      timeout=TIMEOUT_S + 30)
    elapsed = time.monotonic() - t0
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    errors = [e["error"] for e in events if "error" in e]
    emit(f"streaming request_timeout_s={TIMEOUT_S}: {len(events)} events in {elapsed:.2f} s, errors={errors[:1]}")
    assert errors and "time" in errors[-1].lower(), f"stream ran {elapsed:.1f} s without a timeout error"
    assert elapsed <= TIMEOUT_S + 1.5
    assert metric(small_server, "llmserve_requests_running") == 0 or wait_metric(
        small_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=1.5)[0]
