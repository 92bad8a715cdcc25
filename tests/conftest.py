"""Shared fixtures: real tritonservers on free ports, started from a spec's generated repository."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.process_group import http_ok
from llmserve.deploy.tritonserver import (  # noqa: F401  (free_ports: re-exported for tests)
    SHM_DIR,
    SHM_TAG_ENV,
    TritonProcess,
    free_ports,
    session_prefix,
)
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from .durations import describe

ADMIN_KEY = "llmserve-tests"

# Every tritonserver this pytest process starts, in-process or under serve.py / the cluster CLI (they
# inherit the environment), names its shared-memory regions with this tag, so the check at the end of
# the session (no_leaked_shm) sees the regions of this session's servers and no other session's.
os.environ[SHM_TAG_ENV] = f"t{os.getpid()}"


def pytest_report_header(config):
    return describe()  # which lengths the soak, chaos and fuzz tests run at (tests/durations.py)


def leaked_regions() -> list[str]:
    """/dev/shm regions of this session's servers (SHM_TAG_ENV above)."""
    return sorted(f.name for f in SHM_DIR.glob(session_prefix() + "*"))


@pytest.fixture(scope="session", autouse=True)
def no_leaked_shm():
    """After every server of the session is stopped (this fixture is set up first, so torn down last),
    none of their Python-backend regions may be left: a stopped or killed server's are removed by
    TritonProcess._ended or, for a SIGKILLed serve.py / cluster process, by its reaper. What is left
    is removed here and fails the session (an error at the last test's teardown)."""
    yield
    left = leaked_regions()
    for name in left:
        (SHM_DIR / name).unlink(missing_ok=True)
    if left:
        pytest.fail(f"{len(left)} /dev/shm regions of this session's servers were left (removed now): {left[:10]}")


@dataclass
class Server:
    process: TritonProcess
    repository: Path
    log: Path

    @property
    def http(self) -> str:
        return f"localhost:{self.process.http_port}"

    @property
    def grpc(self) -> str:
        return f"localhost:{self.process.grpc_port}"

    @property
    def metrics(self) -> str:
        return f"http://localhost:{self.process.metrics_port}/metrics"


def start_server(
    spec_path: Path, workdir: Path, *, repository: Path | None = None, extra=(), standin: bool = False
) -> Server:
    spec = load_spec(spec_path)
    build_checkpoint(spec)
    if repository is None:
        repository = workdir / "model_repository"
        write_repository(spec, spec_path.name, repository, standin=standin)
    http, grpc, metrics = free_ports(3)
    log = workdir / f"tritonserver-{http}.log"
    proc = TritonProcess(
        repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        exit_timeout_s=spec.serving.exit_timeout_s,
        log_path=log,
        admin_key=ADMIN_KEY,
        extra=extra,
    )
    proc.start()
    try:
        # Ends when ready: only a hung start waits this long (a start on a loaded machine took 180 s).
        proc.wait_ready(timeout_s=900)
        server = Server(proc, repository, log)
        _wait_for_metrics(server, timeout_s=900)
    except Exception:
        proc.stop()
        print(log.read_text()[-5000:])
        raise
    return server


def _wait_for_metrics(server: Server, timeout_s: float) -> None:
    """Triton opens its metrics port a moment after HTTP is ready: a test that reads a metric first
    thing (CI, 2026-12-02: "Connection refused") waits for it here."""
    deadline = time.monotonic() + timeout_s
    while not http_ok(server.metrics):
        if not server.process.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"tritonserver's metrics never answered on {server.metrics}")
        time.sleep(0.2)


# Stopping a test server at the end of its fixture: SIGTERM, then the process group killed after
# STOP_WAIT_S. An idle server exits sooner; one that still has idle keep-alive connections (a test's
# requests.Session, a soak client) waits its whole exit_timeout_s (30 s for the tiny spec) and then
# exits without unloading, its stubs killed all the same: the longer wait buys nothing.
STOP_WAIT_S = 10.0


def stop(server: Server) -> None:
    server.process.stop(timeout_s=STOP_WAIT_S)


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory):
    """The tiny random model (fast) behind the full ensemble."""
    server = start_server(ROOT / "specs/tiny.yaml", tmp_path_factory.mktemp("tiny"))
    yield server
    stop(server)


@pytest.fixture(scope="session")
def trtllm_server(tmp_path_factory):
    """The tensorrtllm layout for the tiny model: every model exactly as production generates it (the
    relay in front of the C++ backend's model), the C++ backend replaced by its CI stand-in."""
    server = start_server(ROOT / "specs/tiny-trtllm.yaml", tmp_path_factory.mktemp("tiny-trtllm"), standin=True)
    yield server
    stop(server)


@pytest.fixture(scope="session", params=["torch", "tensorrtllm"])
def layout_server(request):
    """The same ensemble tests against both layouts, one server each for the whole session."""
    return request.getfixturevalue("tiny_server" if request.param == "torch" else "trtllm_server")


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory):
    """The committed model_repository/ with the real SmolLM2-135M-Instruct."""
    server = start_server(
        ROOT / "specs/default.yaml", tmp_path_factory.mktemp("smollm2"), repository=ROOT / "model_repository"
    )
    yield server
    stop(server)


@pytest.fixture
def emit(capsys):
    """Print measured figures and counts to the terminal even without -s: they are part of the result."""

    def write(text: str) -> None:
        with capsys.disabled():
            print("\n" + text, flush=True)

    return write
