"""The OpenAI frontend as a child process: what deploy/serve.py, deploy/cluster.py and the tests start."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import yaml

from .process_group import ProcessGroup, http_ok
from .reaper import Reaper


def drained_path(workdir: Path) -> Path:
    """The file of Triton endpoints the cluster's frontends send nothing new to (Frontends.drain)."""
    return Path(workdir) / "openai-drained.txt"


def settle_s(spec) -> float:
    """How long a change of the drained file takes to reach every frontend worker (Frontends.settle_s)."""
    return 2 * spec.openai.health_interval_s + 0.5


def set_drained(path: Path, endpoint: str, drained: bool) -> None:
    """Add endpoint to (or remove it from) the drained file, replaced atomically: a worker reads
    either the old list or the new one."""
    from ..client.aio import read_drained  # here: the module loads grpc, which nothing else in deploy needs

    listed = read_drained(path)
    listed = listed | {endpoint} if drained else listed - {endpoint}
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{e}\n" for e in sorted(listed)))
    tmp.replace(path)


def is_healthy(port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> bool:
    return http_ok(f"http://{host}:{port}/health", timeout)


class FrontendProcess(ProcessGroup):
    """One OpenAI frontend (`python -m llmserve.openai_api`); ready when /health answers 200 (it is up
    and sees a ready Triton server). SIGTERM: uvicorn finishes in-flight requests, bounded by
    serving.exit_timeout_s. workers: its processes (None: the spec's openai.worker_count()); they are
    in its process group, so the group's kill ends them too. token_model: its --token-model (None: the
    spec's, openai.token_level)."""

    what = "the OpenAI frontend"
    ready_poll_s = 0.3
    stop_timeout_s = 30.0

    def __init__(
        self,
        spec_path: str | Path,
        *,
        port: int,
        triton: list[str],
        host: str = "127.0.0.1",
        log_path: Path | None = None,
        env: dict | None = None,
        reaper: Reaper | None = None,
        workers: int | None = None,
        drained_file: Path | None = None,
        token_model: str | None = None,
        triton_http: list[str] | None = None,
    ):
        self.host = host
        cmd = [
            sys.executable,
            "-m",
            "llmserve.openai_api",
            "--spec",
            str(spec_path),
            "--host",
            host,
            "--port",
            str(port),
            "--triton",
            ",".join(triton),
            *(["--workers", str(workers)] if workers else []),
            *(["--drained-file", str(drained_file)] if drained_file else []),
            *(["--token-model", token_model] if token_model else []),
            *(["--triton-http", ",".join(triton_http)] if triton_http else []),
        ]
        super().__init__(cmd, port=port, log_path=log_path, reaper=reaper)
        self.env = {**os.environ, **(env or {})}

    def environment(self) -> dict:
        return self.env

    def is_ready(self) -> bool:
        return is_healthy(self.port)


class Frontends:
    """N frontends on 127.0.0.1:base_port + i for `serve.sh --replicas N`, each sending to every
    Triton replica directly (so it can cancel a request on the server that holds it and pick the
    least busy one itself); HAProxy's `openai` frontend balances clients over them. The spec is
    written to the work directory, so a spec changed in memory (tests, --replicas) is the one served.
    They share the host's cores: each gets openai.worker_count(N) worker processes.

    drain(endpoint): every frontend (every worker) stops sending new requests to that Triton server
    within `settle_s`, through a file in the work directory they look at before every pick (it
    works from another process too: `cluster rolling-restart`); undrain() lifts it."""

    def __init__(
        self,
        spec,
        workdir: Path,
        triton: list[str],
        ports: list[int],
        *,
        reaper: Reaper | None = None,
        triton_http: list[str] | None = None,
    ):
        self.workdir = Path(workdir)
        self.spec_path = self.workdir / "openai-spec.yaml"
        self.spec, self.triton, self.ports = spec, triton, list(ports)
        workers = spec.openai.worker_count(len(self.ports))
        self.drained_file = drained_path(self.workdir)
        self.processes = [
            FrontendProcess(
                self.spec_path,
                port=p,
                triton=triton,
                log_path=self.workdir / f"openai{i}.log",
                reaper=reaper,
                workers=workers,
                drained_file=self.drained_file,
                triton_http=triton_http,
            )
            for i, p in enumerate(self.ports)
        ]

    @property
    def settle_s(self) -> float:
        """How long after drain() nothing new reaches the endpoint: a worker looks at the file before
        every pick (client/aio.py Drained), so this is a margin for a request picked just before the
        change and still on its way, on a loaded machine; two health rounds, as when the file was read
        only there (the poll re-applies it too)."""
        return settle_s(self.spec)

    def drain(self, endpoint: str) -> None:
        set_drained(self.drained_file, endpoint, True)

    def undrain(self, endpoint: str) -> None:
        set_drained(self.drained_file, endpoint, False)

    def backends(self) -> list[tuple[str, str, int]]:
        """(name, host, port) for haproxy.render."""
        return [(name, "127.0.0.1", p) for name, p in zip(self.names(), self.ports)]

    def start(self) -> Frontends:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.drained_file.unlink(missing_ok=True)  # a previous run's (one stopped mid-restart)
        self.spec_path.write_text(yaml.safe_dump(self.spec.model_dump(mode="json"), sort_keys=False))
        for f in self.processes:
            f.start()
        return self

    def wait_ready(self, timeout_s: float = 300) -> None:
        for f in self.processes:
            f.wait_ready(timeout_s)

    def names(self) -> list[str]:
        """HAProxy's server names for them, also the supervisor's."""
        return [f"openai{i}" for i in range(len(self.processes))]

    def stop(self) -> None:
        """SIGTERM to all at once (each finishes its own in-flight requests), then wait for each."""
        for f in self.processes:
            if f.alive():
                f.proc.send_signal(signal.SIGTERM)
        for f in self.processes:
            f.stop()
