"""serving.request_timeout_s: a request still generating after that long is cancelled and answered
with an error, and its engine slot is freed (the spec here sets 3 s). The requests ask for TOKENS, about
a minute of generation on an idle machine: far longer than the timeout on any machine (4,000 tokens,
~5 s here, would finish inside 3 s on a CPU twice as fast, and the test would fail)."""

from __future__ import annotations

import json
import time

import pytest
import requests

from .conftest import EVENT_TIMEOUT_S, long_request, metric, reliability_server, stop, wait_metric

TIMEOUT_S = 3.0
TOKENS = 40000
TIMED_OUT = "llmserve_requests_timed_out_total"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def timeout_server(tmp_path_factory):
    server = reliability_server(tmp_path_factory, "tiny-timeout", timeout_s=TIMEOUT_S, max_out=TOKENS)
    yield server
    stop(server)


def test_request_timeout_cancels_generation(timeout_server, emit):
    wait_metric(timeout_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=EVENT_TIMEOUT_S)
    t_out0 = metric(timeout_server, TIMED_OUT)
    t0 = time.monotonic()
    r = requests.post(
        f"http://{timeout_server.http}/v2/models/ensemble/generate", json=long_request(TOKENS), timeout=TIMEOUT_S + 120
    )
    elapsed = time.monotonic() - t0
    emit(f"request_timeout_s={TIMEOUT_S}: answered {r.status_code} after {elapsed:.2f} s: {r.text[:160]}")
    assert r.status_code != 200, f"a request past its timeout was answered normally after {elapsed:.1f} s"
    assert "time" in r.json().get("error", "").lower(), r.text[:300]
    assert elapsed >= TIMEOUT_S * 0.95, "answered before its timeout"
    # Cut by the timeout (its counter moved), not by anything else; the slot is free again.
    assert wait_metric(timeout_server, TIMED_OUT, lambda v: v > t_out0, timeout_s=EVENT_TIMEOUT_S)[0]
    assert wait_metric(timeout_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=EVENT_TIMEOUT_S)[0]


def test_request_timeout_streaming(timeout_server, emit):
    """A stream past its timeout ends with an error event (under HTTP 200: Triton has already sent its status line)."""
    wait_metric(timeout_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=EVENT_TIMEOUT_S)
    t_out0 = metric(timeout_server, TIMED_OUT)
    t0 = time.monotonic()
    r = requests.post(
        f"http://{timeout_server.http}/v2/models/ensemble/generate_stream",
        json=long_request(TOKENS),
        timeout=TIMEOUT_S + 120,
    )
    elapsed = time.monotonic() - t0
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    errors = [e["error"] for e in events if "error" in e]
    emit(f"streaming request_timeout_s={TIMEOUT_S}: {len(events)} events in {elapsed:.2f} s, errors={errors[:1]}")
    assert errors and "time" in errors[-1].lower(), f"stream ran {elapsed:.1f} s without a timeout error"
    assert len(events) - 1 < TOKENS, "the stream was not cut short"
    assert elapsed >= TIMEOUT_S * 0.95
    assert wait_metric(timeout_server, TIMED_OUT, lambda v: v > t_out0, timeout_s=EVENT_TIMEOUT_S)[0]
    assert wait_metric(timeout_server, "llmserve_requests_running", lambda v: v == 0, timeout_s=EVENT_TIMEOUT_S)[0]
