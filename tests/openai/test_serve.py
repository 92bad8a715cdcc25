"""The README's main command serves the OpenAI API: `python -m llmserve.deploy.serve` (what
scripts/serve.sh execs) starts the frontend next to tritonserver; one SIGTERM stops both and leaves
no process behind (tiny model, free ports)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import openai
import pytest

from llmserve.deploy.frontend import is_healthy
from llmserve.deploy.tritonserver import free_ports
from llmserve.spec import ROOT, load_spec

from ..processes import tree, wait_gone

pytestmark = pytest.mark.e2e
TINY = ROOT / "specs" / "tiny.yaml"


def test_serve_starts_the_openai_frontend_and_sigterm_stops_everything(tmp_path, emit):
    http, grpc, metrics, port = free_ports(4)
    log = tmp_path / "serve.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmserve.deploy.serve",
            "--spec",
            str(TINY),
            "--repository",
            str(tmp_path / "repo"),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
            "--metrics-port",
            str(metrics),
            "--openai-port",
            str(port),
        ],
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    pids: set[int] = set()
    try:
        t0 = time.monotonic()
        while not is_healthy(port, timeout=1):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - t0 < 300, "the OpenAI frontend was not healthy after 300 s"
            time.sleep(0.3)
        pids = tree(proc.pid)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        name = load_spec(TINY).name
        r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length"
        # serve.py prints its ready line after its own readiness poll, which can come a moment after ours.
        t1 = time.monotonic()
        while "ready. Try:" not in log.read_text() and proc.poll() is None and time.monotonic() - t1 < 120:
            time.sleep(0.2)
        assert "ready. Try:" in log.read_text() and f"localhost:{port}/v1/chat/completions" in log.read_text()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(120)
        left, _ = wait_gone(pids, 10)
        emit(
            f"serve.py with the OpenAI frontend: SIGTERM -> exited {rc} after {time.monotonic() - t0:.2f} s, "
            f"{len(pids)} processes before, {len(left)} left"
        )
        assert not left, left
        assert not is_healthy(port, timeout=1)
    finally:
        for pid in tree(proc.pid) | pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
