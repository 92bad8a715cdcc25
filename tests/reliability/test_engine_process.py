"""engine.torch.engine_process on a real tritonserver: the ensemble answers exactly what it answers with
the engine on the stub's thread (same checkpoint, greedy), and when the engine's stub dies the engine's
process does not outlive it (a process left behind would hold the GPU's memory). Cancellation with the
engine process: test_cancellation.py (every test there runs on both)."""

from __future__ import annotations

import signal

import psutil
import pytest

from ..e2e.client import generate_stream
from ..processes import load_bound, stub_pid, wait_gone
from .conftest import CAPACITY_TIMEOUT_S, reliability_server, stop

pytestmark = pytest.mark.e2e


def _engine_process(stub: int) -> int:
    """The stub's child that runs the engine (multiprocessing's spawn: `spawn_main` in its argv)."""
    for child in psutil.Process(stub).children():
        if any("spawn_main" in arg for arg in child.cmdline()):
            return child.pid
    raise LookupError(f"no engine process under stub {stub}")


def test_the_ensemble_answers_as_with_the_engine_on_the_stubs_thread(process_capacity_server, capacity_server):
    body = {"text_input": "The capital of France is", "max_tokens": 48, "min_tokens": 48}
    texts = [
        "".join(e["text_output"] for e in generate_stream(server, body))
        for server in (capacity_server, process_capacity_server)
    ]
    assert texts[0] and texts[1] == texts[0]


@pytest.fixture
def doomed_server(tmp_path_factory):
    """Its own server: the test kills its engine stub, and the stub's watchdog takes tritonserver down."""
    server = reliability_server(
        tmp_path_factory, "tiny-process-doomed", timeout_s=CAPACITY_TIMEOUT_S, engine_process=True
    )
    yield server
    stop(server)


def test_the_engine_process_ends_with_its_stub(doomed_server, emit):
    stub = stub_pid(doomed_server.process.proc.pid)
    engine = _engine_process(stub)
    psutil.Process(stub).send_signal(signal.SIGKILL)
    left, waited = wait_gone([engine], load_bound(30))
    emit(f"engine process {engine} gone {waited:.2f} s after its stub was killed")
    assert not left
