"""The frontend as a child process: what deploy/serve.py, deploy/cluster.py and the tests start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

import yaml


def is_healthy(port: int, host: str = "127.0.0.1", timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class FrontendProcess:
    def __init__(self, spec_path: str | Path, *, port: int, triton: list[str], host: str = "127.0.0.1",
                 log_path: Optional[Path] = None, env: Optional[dict] = None):
        self.port, self.host, self.log_path = port, host, log_path
        self.cmd = [sys.executable, "-m", "llmserve.openai_api", "--spec", str(spec_path), "--host", host,
                    "--port", str(port), "--triton", ",".join(triton)]
        self.env = {**os.environ, **(env or {})}
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "FrontendProcess":
        out = open(self.log_path, "ab") if self.log_path else None
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                     start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float = 300) -> None:
        """Until /health answers 200 (the frontend is up and sees a ready Triton server)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the OpenAI frontend exited with {self.proc.returncode} before it was ready"
                                   + (f"; log: {self.log_path}" if self.log_path else ""))
            if is_healthy(self.port):
                return
            time.sleep(0.3)
        raise TimeoutError(f"the OpenAI frontend is not healthy on :{self.port} after {timeout_s} s")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> Optional[int]:
        """SIGTERM (uvicorn finishes in-flight requests, bounded by serving.exit_timeout_s), then kill."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.proc.wait()


class Frontends:
    """N frontends on 127.0.0.1:base_port + i for `serve.sh --replicas N`, each sending to every
    Triton replica directly (so it can cancel a request on the server that holds it and pick the
    least busy one itself); HAProxy's `openai` frontend balances clients over them. The spec is
    written to the work directory, so a spec changed in memory (tests, --replicas) is the one served."""

    def __init__(self, spec, workdir: Path, triton: list[str], ports: list[int]):
        self.workdir = Path(workdir)
        self.spec_path = self.workdir / "openai-spec.yaml"
        self.spec, self.triton, self.ports = spec, triton, list(ports)
        self.processes = [FrontendProcess(self.spec_path, port=p, triton=triton, log_path=self.workdir / f"openai{i}.log")
                          for i, p in enumerate(self.ports)]
        self.stopping = False

    def backends(self) -> list[tuple[str, str, int]]:
        """(name, host, port) for haproxy.render."""
        return [(f"openai{i}", "127.0.0.1", p) for i, p in enumerate(self.ports)]

    def start(self) -> "Frontends":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(yaml.safe_dump(self.spec.model_dump(mode="json"), sort_keys=False))
        for f in self.processes:
            f.start()
        return self

    def wait_ready(self, timeout_s: float = 300) -> None:
        for f in self.processes:
            f.wait_ready(timeout_s)

    def pids(self) -> list[int]:
        return [f.proc.pid for f in self.processes if f.proc is not None]

    def supervise_once(self, say=print) -> bool:
        """Start frontends that exited again; True if one was."""
        restarted = False
        for i, f in enumerate(self.processes):
            if not self.stopping and f.proc is not None and not f.alive():
                say(f"openai{i} exited ({f.proc.returncode}); starting it again")
                f.start()
                restarted = True
        return restarted

    def stop(self) -> None:
        self.stopping = True
        for f in self.processes:
            if f.alive():
                f.proc.send_signal(signal.SIGTERM)
        for f in self.processes:
            f.stop()
