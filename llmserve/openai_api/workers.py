"""Several worker processes behind one frontend port (`openai.workers`, `--workers`).

One frontend process streams about one core's worth of tokens (docs/perf-gpu.md): JSON, SSE and gRPC
per response are Python work under one GIL. With `workers` > 1 the frontend is uvicorn's supervisor
(uvicorn.supervisors.Multiprocess): it binds the port once and spawns the workers, which accept from
that one socket; each worker is a whole frontend (its own Triton clients, health polling, failover,
resume and hang-up cancellation: a request lives in the worker that accepted its connection). The
supervisor pings each worker every half second and starts a new one in place of one that died or
hangs; SIGTERM (or SIGINT) goes to every worker, each finishes its in-flight requests (bounded by
serving.exit_timeout_s) and the supervisor exits after the last.

Metrics: prometheus_client's multiprocess mode. Every worker writes its series to files in one
folder (PROMETHEUS_MULTIPROC_DIR when set, else a folder per port under the temp directory) and
`GET /metrics`, whichever worker answers it, adds up all of them: counters and histograms over every
worker that ever ran (a dead worker's counts stay), the running-requests gauge over the living ones
(a dead worker's is dropped when the supervisor replaces it). The folder's files are cleared at
start and removed at exit, so a frontend killed with SIGKILL leaves its files to the next start on
that port. In-flight request ids are shared the same way (access.py, InflightIds: a file per id in
that folder's `inflight/`), so an X-Request-Id in use in one worker gets a suffix in another.

The workers are spawned (fresh interpreters), so each rebuilds its app from the arguments the
supervisor leaves in LLMSERVE_OPENAI_WORKER (worker_app) and configures its own logging."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import uvicorn
from prometheus_client.multiprocess import mark_process_dead
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from ..logs import configure_from_args
from ..spec import load_spec
from ..spec.openai import AUTO
from .access import IDS_ENV
from .listen import listen_socket

log = logging.getLogger(__name__)

ARGS_ENV = "LLMSERVE_OPENAI_WORKER"
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's name: read when a process imports it
HEALTH_TIMEOUT_S = 30


def metrics_dir(port: int) -> Path:
    """The workers' metric files: PROMETHEUS_MULTIPROC_DIR, else one folder per port."""
    given = os.environ.get(METRICS_ENV)
    return Path(given) if given else Path(tempfile.gettempdir()) / f"llmserve-openai-{port}-metrics"


def _clear(folder: Path) -> None:
    for f in folder.glob("*.db"):
        f.unlink(missing_ok=True)
    shutil.rmtree(folder / "inflight", ignore_errors=True)


def worker_app():
    """uvicorn's app factory, in each worker."""
    from .app import create_app
    from .auth import KeyCheck
    from .config import settings_from_spec
    from .service import Service

    _end_with_parent()
    a = json.loads(os.environ[ARGS_ENV])
    spec = load_spec(a["spec"])
    configure_from_args(argparse.Namespace(log_level=a["log_level"], log_format=a["log_format"]), spec)
    settings = settings_from_spec(
        spec, a["endpoints"], a.get("drained_file"), a.get("token_model", AUTO), a.get("http_endpoints")
    )
    return create_app(Service(settings), KeyCheck(settings.api_keys))


def _end_with_parent() -> None:
    """SIGTERM this worker when the supervisor dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG): no
    orphan keeps serving the port. (Started by serve.sh or the cluster, the supervisor's process group
    is also reaped: deploy/reaper.py.)"""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the process group is the only guard
        return
    if os.getppid() == 1:  # the supervisor died before the call
        os.kill(os.getpid(), signal.SIGTERM)


class Supervisor(Multiprocess):
    """uvicorn's supervisor, plus: a worker that died leaves the running-requests sum."""

    def __init__(self, config: uvicorn.Config, sockets, metrics: Path):
        super().__init__(config, sockets)
        self.metrics = metrics

    def keep_subprocess_alive(self) -> None:
        before = {p.pid for p in self.processes}
        super().keep_subprocess_alive()
        for pid in before - {p.pid for p in self.processes}:
            mark_process_dead(pid, str(self.metrics))

    def failed_to_start(self) -> bool:
        return any(p.exitcode == STARTUP_FAILURE for p in self.processes)


def run(worker_args: dict, workers: int, **uvicorn_options) -> int:
    """Serve with `workers` processes until SIGTERM / SIGINT. worker_args: spec, endpoints, log_level,
    log_format (worker_app's). uvicorn_options: uvicorn.Config's (host, port, ...). Returns the exit code."""
    folder = metrics_dir(uvicorn_options["port"])
    owned = not os.environ.get(METRICS_ENV)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if owned and folder.stat().st_uid != os.getuid():  # the temp directory is everyone's
        raise PermissionError(f"{folder} belongs to another user: set {METRICS_ENV} to a folder of yours")
    _clear(folder)  # a killed predecessor's counts and ids are not ours
    (folder / "inflight").mkdir()
    os.environ[METRICS_ENV] = str(folder)
    os.environ[IDS_ENV] = str(folder / "inflight")
    os.environ[ARGS_ENV] = json.dumps(worker_args)
    # A worker that does not answer the supervisor's ping for HEALTH_TIMEOUT_S is taken for hung and
    # replaced (uvicorn's default, 5 s, replaced workers that were only starting on a loaded machine).
    config = uvicorn.Config(
        f"{__name__}:worker_app",
        factory=True,
        workers=workers,
        timeout_worker_healthcheck=HEALTH_TIMEOUT_S,
        **uvicorn_options,
    )
    sock = listen_socket(config.host, config.port)  # not config.bind_socket(): Nagle (listen.py)
    supervisor = Supervisor(config, [sock], folder)
    try:
        supervisor.run()
    finally:
        sock.close()
        if owned:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            _clear(folder)
    if supervisor.failed_to_start():
        log.error("a worker failed to start (its error is above)")
        return 1
    return 0
