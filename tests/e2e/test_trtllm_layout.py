"""The tensorrtllm layout on a real tritonserver: the C++ backend's model (`tensorrt_llm_cpp`) is served
by the CI stand-in, and these tests hold the stand-in to the backend's tensor interface. The ensemble
tests (test_ensemble.py, test_bad_input.py) run against this layout too, through `layout_server`."""

from __future__ import annotations

import queue
import re
import statistics
import time
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from llmserve import contract as C

pytestmark = pytest.mark.e2e

PROMPT = [1, 504, 3458, 314, 260]


def _inputs(max_tokens=8, ids=PROMPT, **extra):
    values = {
        "input_ids": np.array([ids], dtype=np.int32),
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[max_tokens]], dtype=np.int32),
    }
    for name, v in extra.items():
        values[name] = np.array(
            [[v]], dtype=np.bool_ if isinstance(v, bool) else np.float32 if isinstance(v, float) else np.int32
        )
    out = []
    for name, arr in values.items():
        t = grpcclient.InferInput(
            name, list(arr.shape), {"bool": "BOOL", "float32": "FP32"}.get(arr.dtype.name, "INT32")
        )
        t.set_data_from_numpy(arr)
        out.append(t)
    return out


class Stream:
    """One gRPC stream; collects the responses (and errors) of every request sent on it, by id."""

    def __init__(self, server):
        self.results: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.grpc)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, model, inputs, request_id="", outputs=None):
        req_out = [grpcclient.InferRequestedOutput(n) for n in outputs] if outputs else None
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, outputs=req_out, enable_empty_final_response=True
        )

    def until_final(self, request_id="", timeout=60):
        """(responses with outputs, error or None) of one request."""
        got = []
        while True:
            r, e = self.results.get(timeout=timeout)
            if e is not None:
                return got, e
            resp = r.get_response()
            if resp.id != request_id:
                continue
            if resp.outputs:
                got.append(r)
            if resp.parameters["triton_final_response"].bool_param:
                return got, None

    def close(self):
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(trtllm_server):
    s = Stream(trtllm_server)
    yield s
    s.close()


# The token outputs, which the relay (tensorrt_llm) declares too; generation_logits is the backend model's only.
BACKEND_OUTPUTS = [t.name for t in C.BACKEND_OUTPUTS if t.name != C.GENERATION_LOGITS]
WITH_LOGITS = [*BACKEND_OUTPUTS, C.GENERATION_LOGITS]


def test_streaming_sends_one_response_per_token_and_no_context(stream):
    stream.send(C.BACKEND, _inputs(6, min_tokens=6, streaming=True), "s1", BACKEND_OUTPUTS)
    got, err = stream.until_final("s1")
    assert err is None and len(got) == 6
    for r in got:
        names = {o.name for o in r.get_response().outputs}
        assert names == {"output_ids", "sequence_length"}  # no log probs unless asked, no output_context_ids
        assert r.as_numpy("output_ids").shape == (1, 1, 1) and r.as_numpy("sequence_length").tolist() == [[1]]


def test_log_probs_only_when_asked(stream):
    stream.send(C.BACKEND, _inputs(4, min_tokens=4, streaming=True, return_log_probs=True), "s2", BACKEND_OUTPUTS)
    got, err = stream.until_final("s2")
    assert err is None and len(got) == 4
    assert all(r.as_numpy("output_log_probs").shape == (1, 1, 1) for r in got)
    cum = [float(r.as_numpy("cum_log_probs").reshape(-1)[0]) for r in got]
    assert cum == sorted(cum, reverse=True)  # running total of negative log probs


def test_generation_logits_only_when_asked_shaped_as_the_backend(stream):
    """return_generation_logits (the spec builds with gather_generation_logits): streaming, each response
    [1, new tokens, beams, vocab]; non-streaming [1, beams, request_output_len, vocab], rows past the
    output never written (zero here). Without it, no logits even when the output is requested."""
    stream.send(C.BACKEND, _inputs(3, min_tokens=3, streaming=True, return_generation_logits=True), "g1", WITH_LOGITS)
    got, err = stream.until_final("g1")
    assert err is None and len(got) == 3
    shapes = {r.as_numpy(C.GENERATION_LOGITS).shape for r in got}
    ((_, _, _, vocab),) = shapes
    assert shapes == {(1, 1, 1, vocab)} and vocab > 1000 and got[0].as_numpy(C.GENERATION_LOGITS).dtype == np.float32
    first = got[0].as_numpy(C.GENERATION_LOGITS).reshape(-1)
    assert int(first.argmax()) == int(got[0].as_numpy("output_ids").reshape(-1)[0])  # greedy: the top logit
    stream.send(C.BACKEND, _inputs(4, min_tokens=2, return_generation_logits=True), "g2", WITH_LOGITS)
    (r,), err = stream.until_final("g2")
    n = int(r.as_numpy("sequence_length").reshape(-1)[0])
    logits = r.as_numpy(C.GENERATION_LOGITS)
    assert err is None and logits.shape == (1, 1, 4, vocab) and not logits[0, 0, n:].any()
    assert np.allclose(logits[0, 0, 0], first, atol=1e-5)  # the same prompt, greedy: the same first row
    stream.send(C.BACKEND, _inputs(2, streaming=True), "g3", WITH_LOGITS)
    got, err = stream.until_final("g3")
    assert err is None and all(C.GENERATION_LOGITS not in {o.name for o in r.get_response().outputs} for r in got)


def test_non_streaming_includes_the_prompt_unless_excluded(stream):
    stream.send(C.BACKEND, _inputs(3, min_tokens=3, exclude_input_in_output=False), "n1", BACKEND_OUTPUTS)
    (r,), err = stream.until_final("n1")
    assert err is None and r.as_numpy("output_ids").reshape(-1)[: len(PROMPT)].tolist() == PROMPT
    assert r.as_numpy("sequence_length").tolist() == [[len(PROMPT) + 3]]


@pytest.mark.parametrize("model", [C.BACKEND, C.ENGINE])
def test_a_direct_client_gets_only_the_outputs_it_asked_for(stream, model):
    """Both models send only request.requested_output_names(): an unrequested tensor handed to a decoupled
    response sender kills a Python 3.12 stub (tests/e2e/test_stub_python.py)."""
    stream.send(
        model, _inputs(4, min_tokens=4, streaming=True, return_log_probs=True), "o1", ["output_ids", "sequence_length"]
    )
    got, err = stream.until_final("o1")
    assert err is None and got
    assert all({o.name for o in r.get_response().outputs} == {"output_ids", "sequence_length"} for r in got)


@pytest.mark.parametrize("model", [C.BACKEND, C.ENGINE])
def test_stop_input_cancels_by_request_id(stream, model):
    """TensorRT-LLM's `stop`: a request with stop=true and the same request id ends the generation
    (directly on the backend model, and forwarded by the relay)."""
    stream.send(model, _inputs(200, min_tokens=200, streaming=True), "long", BACKEND_OUTPUTS)
    r, e = stream.results.get(timeout=120)  # the first token: it runs
    assert e is None
    stream.send(model, _inputs(1, stop=True), "long", BACKEND_OUTPUTS)
    got, err = stream.until_final("long")
    assert len(got) < 150, "the stop request did not end the generation"


def test_stop_without_request_id_is_an_error(stream):
    stream.send(C.BACKEND, _inputs(1, stop=True), "", BACKEND_OUTPUTS)
    _, err = stream.until_final("")
    assert err is not None and "request ID is not provided" in str(err)


def test_bad_input_gets_the_backends_message(stream):
    stream.send(C.BACKEND, _inputs(4, runtime_top_p=1.5, streaming=True), "b1", BACKEND_OUTPUTS)
    _, err = stream.until_final("b1")
    assert err is not None and "Assertion failed: topP.value() <= 1.f" in str(err)


def _metric(server, name: str) -> float:
    text = urllib.request.urlopen(server.metrics, timeout=10).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_cancel_through_the_ensemble_stops_the_backend(trtllm_server):
    """A client that cancels its gRPC stream: postprocessing sees the cancel and sends `stop` with the
    request id to tensorrt_llm (pipeline/cancellation.py); the relay forwards it to the backend's
    request. The backend's slot is free long before the generation would have ended."""
    from .client import grpc_inputs

    max_out = 256
    cancelled0 = _metric(trtllm_server, "llmserve_requests_cancelled_total")
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(trtllm_server.grpc)
    client.start_stream(callback=lambda result, error: got.put((time.monotonic(), error)))
    client.async_stream_infer(
        "ensemble",
        grpc_inputs("Tell me a story.", max_out, stream=True, min_tokens=max_out),
        request_id=str(uuid.uuid4()),
    )
    times = []
    for _ in range(8):
        t, error = got.get(timeout=60)
        assert error is None, error
        times.append(t)
    gap = statistics.median(b - a for a, b in zip(times, times[1:]))
    client.stop_stream(cancel_requests=True)
    client.close()
    t0, freed = time.monotonic(), False
    while time.monotonic() - t0 < 60:
        if _metric(trtllm_server, "llmserve_requests_running") == 0:
            freed = True
            break
        time.sleep(0.05)
    dt = time.monotonic() - t0
    remaining = (max_out - 8) * gap
    assert freed and dt < 0.5 * remaining + 1.0, f"slot held {dt:.2f} s; the rest would take {remaining:.2f} s"
    time.sleep(1.2)  # engine metrics publish every 0.5 s
    assert _metric(trtllm_server, "llmserve_requests_cancelled_total") > cancelled0
