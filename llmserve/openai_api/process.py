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
