"""Logs an operator can follow, on a real tritonserver (tiny model, verbose log on) with the OpenAI
frontend in front: an engine step that raises shows its traceback in tritonserver's log; a frontend
request writes one access line with its request id, and the same id is on the Triton-side line of
that request (the engine's per-request line, a verbose one).

The fault is injected into this test's copy of the repository only: its tensorrt_llm model.py gets a
few lines appended that make the engine's prefill raise for requests whose id starts with
`inject-fault`."""

from __future__ import annotations

import queue
import time
import uuid

import pytest
import requests
import tritonclient.grpc as grpcclient

from llmserve.deploy.frontend import FrontendProcess
from llmserve.deploy.tritonserver import free_ports
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from ..conftest import start_server
from .client import grpc_inputs

pytestmark = pytest.mark.e2e

SPEC = ROOT / "specs" / "tiny.yaml"
FAULT = """

# --- added by tests/e2e/test_logs.py: an engine step that raises -------------------------------------
from llmserve.engine import engine as _fault_engine  # noqa: E402

_real_prefill = _fault_engine.Engine._prefill


def _prefill_with_fault(self, seqs):
    if any(s.key.startswith("inject-fault") for s in seqs):
        raise RuntimeError("injected fault for the log test")
    return _real_prefill(self, seqs)


_fault_engine.Engine._prefill = _prefill_with_fault
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("logs")
    spec = load_spec(SPEC)
    repo = work / "model_repository"
    write_repository(spec, SPEC.name, repo)
    engine_py = repo / "tensorrt_llm" / "1" / "model.py"
    engine_py.write_text(engine_py.read_text() + FAULT)
    server = start_server(SPEC, work, repository=repo, extra=["--log-verbose=1"])
    frontend = FrontendProcess(
        SPEC, port=free_ports(1)[0], triton=[server.grpc], triton_http=[server.http], log_path=work / "frontend.log"
    )
    try:
        frontend.start().wait_ready(300)
        yield server, frontend
    finally:
        frontend.stop()
        server.process.stop()


def _wait_for(path, needles: list[str], timeout_s: float = 60) -> str:
    """The log's text once every needle is in it (lines from a Python stub reach it asynchronously)."""
    t0 = time.monotonic()
    while True:
        text = path.read_text(errors="replace")
        if all(n in text for n in needles):
            return text
        if time.monotonic() - t0 > timeout_s:
            missing = [n for n in needles if n not in text]
            raise AssertionError(f"{path.name} lacks {missing}; its end:\n{text[-4000:]}")
        time.sleep(0.2)


def test_a_failed_engine_step_shows_its_traceback_in_tritonservers_log(stack):
    server, _ = stack
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "ensemble",
            grpc_inputs("hello", 4, stream=True),
            request_id="inject-fault-1",
            enable_empty_final_response=True,
        )
        _, error = results.get(timeout=120)
    finally:
        client.stop_stream()
        client.close()
    assert error is not None and "injected fault" in str(error), error
    text = _wait_for(server.log, ["engine step failed", "RuntimeError: injected fault for the log test"])
    line = next(line for line in text.splitlines() if "engine step failed" in line)
    assert "inject-fault-1" in line and "[llmserve.engine.engine]" in line, line
    after = text[text.index(line) :]
    assert "Traceback" in after and "_prefill_with_fault" in after  # the traceback, with the frame that raised
    # The server still serves: one failed step is not fatal.
    r = requests.post(
        f"http://{server.http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 2}, timeout=120
    )
    assert r.status_code == 200, r.text


def test_one_request_id_from_the_frontend_to_tritonserver(stack):
    server, frontend = stack
    rid = f"logs-e2e-{uuid.uuid4().hex[:12]}"
    r = requests.post(
        f"http://127.0.0.1:{frontend.port}/v1/completions",
        headers={"X-Request-Id": rid},
        json={"model": load_spec(SPEC).name, "prompt": "Hello", "max_tokens": 4},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == rid
    front = _wait_for(frontend.log_path, [f"[{rid}] POST /v1/completions 200"])
    access = [line for line in front.splitlines() if rid in line and "llmserve.openai_api.access" in line]
    assert len(access) == 1 and "completion_tokens=4" in access[0], access
    # The engine's line of that request: Triton request id <request id>-<attempt>, at the verbose level.
    triton = _wait_for(server.log, [f"[{rid}-1] finished: length"])
    line = next(line for line in triton.splitlines() if f"[{rid}-1] finished" in line)
    assert "[llmserve.engine.engine]" in line and "4 generated tokens" in line, line
