"""Shutdown of `serve.sh` (llmserve.deploy.serve), each case on its own server:

- idle, SIGTERM: exits within 10 s (stretched by the machine's load, processes.shutdown_bound) and
  leaves no process behind;
- busy, SIGTERM: the stream in flight is finished (every token), then it exits;
- the supervisor SIGKILLed (what Docker, systemd and Kubernetes do after their grace period):
  tritonserver, its Python stubs and their watchdogs go too, and their /dev/shm regions (the
  reaper, deploy/reaper.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from llmserve.deploy.tritonserver import free_ports, is_ready
from llmserve.spec import ROOT

from ..processes import kill_all, living, shm_regions, shutdown_bound, tree, wait_gone
from .conftest import EVENT_TIMEOUT_S

pytestmark = pytest.mark.e2e
TOKENS = 250  # tiny spec: max_output_len 256


def _spec(work: Path) -> Path:
    spec = yaml.safe_load((ROOT / "specs/tiny.yaml").read_text())
    spec["name"] = "tiny-shutdown"
    spec["serving"] = {"exit_timeout_s": 30}
    path = work / "tiny-shutdown.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


class Serve:
    """`python -m llmserve.deploy.serve` as a user runs it (scripts/serve.sh execs it)."""

    def __init__(self, work: Path):
        self.http, self.grpc, self.metrics, self.openai = free_ports(4)
        self.log = work / f"serve-{self.http}.log"
        cmd = [
            sys.executable,
            "-m",
            "llmserve.deploy.serve",
            "--spec",
            str(_spec(work)),
            "--repository",
            str(work / "repo"),
            "--http-port",
            str(self.http),
            "--grpc-port",
            str(self.grpc),
            "--metrics-port",
            str(self.metrics),
            "--openai-port",
            str(self.openai),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
        t0 = time.monotonic()
        while not is_ready(self.http, timeout=1):
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() - t0 < 900, "serve.py not ready after 900 s"  # only a hung start gets here
            time.sleep(0.3)
        self.pids = tree(self.proc.pid)  # serve.py, its reaper, tritonserver, stubs, watchdogs

    def close(self):
        kill_all(self.pids, [self.http])


@pytest.fixture
def serve(tmp_path):
    s = Serve(tmp_path)
    yield s
    s.close()


def test_idle_sigterm_exits_fast_and_leaves_nothing(serve, emit):
    t0 = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    rc = serve.proc.wait(60)
    took = time.monotonic() - t0
    left, _ = wait_gone(serve.pids, EVENT_TIMEOUT_S)
    emit(f"serve.py idle SIGTERM: exited {rc} after {took:.2f} s; {len(serve.pids)} processes before, {len(left)} left")
    assert took < shutdown_bound(), f"idle shutdown took {took:.1f} s (bound {shutdown_bound():.0f} s)"
    assert not left, left


def test_busy_sigterm_drains_the_stream_in_flight(serve, emit):
    got, done = [], threading.Event()

    def stream():
        with requests.post(
            f"http://localhost:{serve.http}/v2/models/ensemble/generate_stream",
            stream=True,
            timeout=120,
            json={"text_input": "Count", "max_tokens": TOKENS, "min_tokens": TOKENS, "stream": True},
        ) as r:
            for line in r.iter_lines():
                if line.startswith(b"data:"):
                    got.append(json.loads(line[5:]))
        done.set()

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    while len(got) < 5:
        assert t.is_alive(), got
        time.sleep(0.02)
    t0 = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    rc = serve.proc.wait(90)
    took = time.monotonic() - t0
    t.join(30)
    errors = [e for e in got if "error" in e]
    # One event can carry several tokens (the engine coalesces when sends queue up).
    tokens = sum(len(lp) if isinstance(lp := e.get("output_log_probs"), list) else 1 for e in got if "error" not in e)
    emit(
        f"serve.py SIGTERM with a {TOKENS}-token stream in flight: {tokens} tokens in {len(got)} events, "
        f"{len(errors)} errors; exited {rc} {took:.2f} s after the signal"
    )
    assert done.is_set() and not errors and tokens == TOKENS, (tokens, errors[:1])
    assert not wait_gone(serve.pids, EVENT_TIMEOUT_S)[0]


def test_sigkilled_supervisor_leaves_nothing(serve, emit):
    before = living(serve.pids)
    os.kill(serve.proc.pid, signal.SIGKILL)
    serve.proc.wait()
    left, took = wait_gone(serve.pids, EVENT_TIMEOUT_S)
    regions = shm_regions([serve.http])  # the reaper removes them once it has killed the server
    emit(
        f"serve.py SIGKILLed: {len(before)} processes (tritonserver, stubs, watchdogs, reaper); "
        f"{len(left)} left after {took:.2f} s; {len(regions)} /dev/shm regions left"
    )
    assert not left, left
    assert not regions, regions
    assert not is_ready(serve.http, timeout=1)
