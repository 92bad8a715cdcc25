"""Responses sent from another thread must not kill a Python 3.12 stub (the H200's Python).

On the H200 the first direct token-level request to `tensorrt_llm` (tools/bench.py asks for
output_ids and sequence_length only) killed its stub: `segfault at 10 ... in libpython3.12.so`.
Cause: Triton 2.51's ResponseSender::Send drops the tensors the client did not request without the
GIL (llmserve/pipeline/triton_glue.py, `tensors`). Our CPU machines run 3.11 stubs, which survive
it, so this test starts a server whose stubs run Python 3.12 (LLMSERVE_STUB_PYTHON) on a model
that answers exactly like the tensorrt_llm adapter: StreamSender, from a thread that is not
execute()'s, with all five token-level outputs. A twin model that sends every tensor (what the
adapter did before) shows the stub really dies, i.e. that this test catches the bug.

The tensorrtllm layout's relay (the real generated `tensorrt_llm` model) runs on a 3.12 stub too, in front
of a torch-free backend that answers like the C++ backend: a direct token-level client asking for two
outputs killed the relay's stub on the H200 before the relay sent only the requested ones.

Needs a Python 3.12 virtualenv for the stub: `scripts/stub_python.sh /path/to/python3.12`
(default location build/stubvenv-3.12, or set LLMSERVE_TEST_STUB_PYTHON); skipped without one."""

from __future__ import annotations

import os
import queue
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from llmserve import contract as C
from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.tritonserver import TritonProcess, free_ports
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from ..durations import examples

pytestmark = pytest.mark.e2e

STUB_PYTHON = Path(os.environ.get("LLMSERVE_TEST_STUB_PYTHON", ROOT / "build/stubvenv-3.12/bin/python"))
CHUNKS = 12

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "n" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "output_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] }},
  {{ name: "sequence_length" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "cum_log_probs" data_type: TYPE_FP32 dims: [ -1 ] }},
  {{ name: "output_log_probs" data_type: TYPE_FP32 dims: [ -1, -1 ] }},
  {{ name: "output_context_ids" data_type: TYPE_INT32 dims: [ -1, -1 ] }}
]
parameters {{ key: "prune" value: {{ string_value: "{prune}" }} }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# What the tensorrt_llm adapter does, without the engine: execute() hands a StreamSender to a
# worker thread, which sends the token-level outputs of every chunk (pipeline/engine_service.py).
MODEL = textwrap.dedent("""
    import json
    import queue
    import threading

    import numpy as np
    import triton_python_backend_utils as pb_utils

    from llmserve.pipeline.triton_glue import StreamSender, tensors


    class TritonPythonModel:
        def initialize(self, args):
            params = json.loads(args["model_config"])["parameters"]
            self.prune = params["prune"]["string_value"] == "1"
            self.work = queue.Queue()
            threading.Thread(target=self.loop, daemon=True).start()

        def loop(self):
            while True:
                send, n = self.work.get()
                for i in range(n):
                    new = list(range(i, i + 3))
                    outputs = {"output_ids": np.array([[new]], dtype=np.int32),
                               "sequence_length": np.array([[len(new)]], dtype=np.int32),
                               "cum_log_probs": np.array([[-1.0 * i]], dtype=np.float32),
                               "output_log_probs": np.array([[[-0.5] * len(new)]], dtype=np.float32),
                               "output_context_ids": np.array([[[7, 8]]], dtype=np.int32)}
                    final = i == n - 1
                    if self.prune:
                        send(outputs, final)
                    else:  # the adapter before the fix: every tensor, the unrequested ones too
                        flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
                        send.sender.send(pb_utils.InferenceResponse(output_tensors=tensors(pb_utils, outputs)),
                                         flags=flags)

        def execute(self, requests):
            for request in requests:
                n = int(pb_utils.get_input_tensor_by_name(request, "n").as_numpy()[0])
                self.work.put((StreamSender(pb_utils, request), n))
            return None
""")


# The C++ backend's part, without torch (the stub venv has numpy and tokenizers only): one response per
# token, from a thread of its own, every output the relay asks for (BACKEND_OUTPUTS).
BACKEND = textwrap.dedent("""
    import threading

    import numpy as np
    import triton_python_backend_utils as pb_utils

    from llmserve.pipeline.triton_glue import StreamSender, reader


    class TritonPythonModel:
        def initialize(self, args):
            pass

        def run(self, send, n):
            for i in range(n):
                send({"output_ids": np.array([[[504 + i]]], dtype=np.int32),
                      "sequence_length": np.array([[1]], dtype=np.int32),
                      "cum_log_probs": np.array([[-1.0 * (i + 1)]], dtype=np.float32),
                      "output_log_probs": np.array([[[-1.0]]], dtype=np.float32)}, i == n - 1)

        def execute(self, requests):
            for request in requests:
                read = reader(request)
                send = StreamSender(pb_utils, request)
                stop = read("stop")
                if stop is not None and bool(stop.reshape(-1)[0]):
                    send(None, True)
                    continue
                n = int(read("request_output_len").reshape(-1)[0])
                threading.Thread(target=self.run, args=(send, n), daemon=True).start()
            return None
""")


def _stub_version() -> str | None:
    if not STUB_PYTHON.exists():
        return None
    out = subprocess.run(
        [str(STUB_PYTHON), "-c", "import sys, numpy; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.fixture(scope="module")
def py312_server(tmp_path_factory):
    version = _stub_version()
    if version != "3.12":
        pytest.skip(f"no Python 3.12 stub environment at {STUB_PYTHON} (scripts/stub_python.sh PYTHON3.12)")
    repo = tmp_path_factory.mktemp("stub312") / "repository"
    for name, prune in (("sender", "1"), ("sender_unpruned", "0")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, prune=prune))
        (repo / name / "1" / "model.py").write_text(MODEL)
    # The tensorrtllm layout's relay as generated, in front of the torch-free backend above.
    spec = load_spec(ROOT / "specs/tiny-trtllm.yaml")
    build_checkpoint(spec)
    layout = repo.parent / "tiny-trtllm"
    write_repository(spec, "tiny-trtllm.yaml", layout, standin=True)
    for name in (C.ENGINE, C.BACKEND):
        (layout / name).rename(repo / name)
    (repo / C.BACKEND / "1" / "model.py").write_text(BACKEND)
    http, grpc, metrics = free_ports(3)
    log = repo.parent / "tritonserver.log"
    saved = os.environ.get("LLMSERVE_STUB_PYTHON")
    os.environ["LLMSERVE_STUB_PYTHON"] = str(STUB_PYTHON)
    try:
        proc = TritonProcess(
            repo, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=10, log_path=log
        )
    finally:
        if saved is None:
            os.environ.pop("LLMSERVE_STUB_PYTHON")
        else:
            os.environ["LLMSERVE_STUB_PYTHON"] = saved
    proc.start()
    try:
        proc.wait_ready(timeout_s=120)
        yield proc
    finally:
        proc.stop()


def _token_inputs(n: int) -> list:
    """A direct token-level request (tools/bench.py's): n tokens, streamed."""
    values = {
        "input_ids": np.array([[1, 504, 3458]], dtype=np.int32),
        "input_lengths": np.array([[3]], dtype=np.int32),
        "request_output_len": np.array([[n]], dtype=np.int32),
        "streaming": np.array([[True]], dtype=np.bool_),
    }
    out = []
    for name, arr in values.items():
        t = grpcclient.InferInput(name, list(arr.shape), "BOOL" if arr.dtype == np.bool_ else "INT32")
        t.set_data_from_numpy(arr)
        out.append(t)
    return out


def _stream(port: int, model: str, n: int, outputs: list[str]) -> tuple[list, list[str]]:
    """(results, errors) of one streamed request asking for `outputs` only."""
    client = grpcclient.InferenceServerClient(f"localhost:{port}")
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)), stream_timeout=60)
    try:
        if model == C.ENGINE:
            inputs = _token_inputs(n)
        else:
            inputs = [grpcclient.InferInput("n", [1], "INT32")]
            inputs[0].set_data_from_numpy(np.array([n], dtype=np.int32))
        client.async_stream_infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
        results, errors = [], []
        while len(results) < n and not errors:
            try:
                result, error = got.get(timeout=30)
            except queue.Empty:
                errors.append("no answer within 30 s")
                break
            if error is not None:
                errors.append(str(error))
            else:
                results.append(result)
        return results, errors
    finally:
        client.stop_stream()
        client.close()


def test_subset_of_outputs_from_a_thread_on_python312(py312_server, emit):
    for attempt in range(3):  # the first request is the one that crashed on the H200
        results, errors = _stream(py312_server.grpc_port, "sender", CHUNKS, ["output_ids", "sequence_length"])
        assert not errors, f"attempt {attempt}: {errors}"
        assert len(results) == CHUNKS
        assert results[-1].as_numpy("output_ids").tolist() == [[[CHUNKS - 1, CHUNKS, CHUNKS + 1]]]
        assert results[0].as_numpy("cum_log_probs") is None  # not requested, never sent
    results, errors = _stream(py312_server.grpc_port, "sender", 2, [])  # no outputs named: all of them
    assert not errors and results[0].as_numpy("output_context_ids").tolist() == [[[7, 8]]]
    emit(f"Python 3.12 stub: 3 x {CHUNKS} responses with 2 of 5 outputs requested, then all 5: OK")


def test_the_unpruned_sender_does_kill_a_312_stub(py312_server, emit):
    """The bug this guards against is real on this stub: sending unrequested tensors from a thread
    kills it (if a future Triton fixes python_backend #390, this test says so)."""
    results, errors = _stream(py312_server.grpc_port, "sender_unpruned", CHUNKS, ["output_ids", "sequence_length"])
    assert errors, "the stub survived unrequested tensors: is this Triton newer than 2.51 (python_backend #390)?"
    emit(f"unpruned sender on a Python 3.12 stub: {len(results)} responses, then {errors[0][:80]!r}")
    # The fixed model lives in another stub and keeps serving.
    results, errors = _stream(py312_server.grpc_port, "sender", 3, ["output_ids"])
    assert not errors and len(results) == 3


def test_the_relay_sends_a_direct_client_only_what_it_asked_for_on_python312(py312_server, emit):
    """The H200's fault (docs/perf-gpu.md): the relay's stub died on the first direct token-level request
    asking for output_ids and sequence_length only. Several requests, each streamed token by token."""
    for attempt in range(3):
        results, errors = _stream(py312_server.grpc_port, C.ENGINE, CHUNKS, ["output_ids", "sequence_length"])
        assert not errors, f"attempt {attempt}: {errors}"
        assert len(results) == CHUNKS
        assert [int(r.as_numpy("output_ids").reshape(-1)[0]) for r in results] == [504 + i for i in range(CHUNKS)]
        assert all(r.as_numpy("output_context_ids") is None for r in results)  # not requested, never sent
    emit(f"relay on a Python 3.12 stub: 3 x {CHUNKS} responses with 2 outputs requested: OK")


def _load(port: int, streams: int, requests: int, n: int) -> tuple[dict, list[str]]:
    """`requests` streamed token-level requests of n tokens through the relay, `streams` in flight at a
    time over one gRPC stream, alternately asking for 2 outputs and for all of them. Returns each
    request's generated ids and the errors."""
    client = grpcclient.InferenceServerClient(f"localhost:{port}")
    got: queue.Queue = queue.Queue()
    # No deadline on the whole load (a busy 2-core machine takes minutes): a hang is an answer that never comes.
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    tokens: dict[str, list[int]] = {}
    errors: list[str] = []
    try:
        sent = done = 0

        def submit():
            nonlocal sent
            rid = f"load-{sent}"
            tokens[rid] = []
            outputs = ["output_ids", "sequence_length"] if sent % 2 else []
            client.async_stream_infer(
                C.ENGINE,
                _token_inputs(n),
                request_id=rid,
                outputs=[grpcclient.InferRequestedOutput(o) for o in outputs] or None,
                enable_empty_final_response=True,
            )
            sent += 1

        for _ in range(min(streams, requests)):
            submit()
        while done < requests and not errors:
            try:
                result, error = got.get(timeout=30)
            except queue.Empty:
                errors.append(f"no answer within 30 s ({done} of {requests} done)")
                break
            if error is not None:
                errors.append(str(error))
                break
            rid = result.get_response().id
            ids = result.as_numpy("output_ids")
            if ids is not None:
                tokens[rid] += ids.reshape(-1).tolist()
            if result.get_response().parameters["triton_final_response"].bool_param:
                done += 1
                if sent < requests:
                    submit()
        return tokens, errors
    finally:
        client.stop_stream()
        client.close()


def test_the_relay_under_load_on_python312(py312_server, emit):
    """Many concurrent streams through the relay on a 3.12 stub: every request gets exactly its tokens and
    the stub still answers afterwards. The relay that read the backend over decoupled BLS deadlocked here
    within seconds to minutes (python_backend r24.10's response iterator, docs/perf-gpu.md "The relay's
    hang"; 3,000 requests at 48 streams: hung); over gRPC it serves them all."""
    import time

    n, requests = 48, examples("relay_load_requests")  # tests/durations.py
    t0 = time.monotonic()
    tokens, errors = _load(py312_server.grpc_port, 48, requests, n)
    elapsed = time.monotonic() - t0
    assert not errors, errors[:3]
    assert all(got == [504 + i for i in range(n)] for got in tokens.values()), "a stream lost or reordered tokens"
    results, errors = _stream(py312_server.grpc_port, C.ENGINE, CHUNKS, ["output_ids"])
    assert not errors and len(results) >= 1
    emit(f"relay on a Python 3.12 stub: {requests} x {n} tokens at 48 streams in {elapsed:.1f} s: OK")
