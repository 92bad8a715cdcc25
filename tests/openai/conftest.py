"""One stack for the OpenAI tests: two tritonservers with the real SmolLM2 (the committed
model_repository/) and one OpenAI frontend in front of both, all on free ports."""

from __future__ import annotations

import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import openai
import pytest

from llmserve.deploy.frontend import FrontendProcess
from llmserve.deploy.tritonserver import TritonProcess, free_ports
from llmserve.spec import ROOT, load_spec

DEFAULT = ROOT / "specs" / "default.yaml"
MODEL = load_spec(DEFAULT).name
ADMIN_KEY = "llmserve-tests"


@dataclass
class Stack:
    servers: list[TritonProcess]
    frontend: FrontendProcess
    tokenizer_dir: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.frontend.port}/v1"

    def client(self, **kw) -> openai.OpenAI:
        # max_retries=0: a test must see what the server answered, not the SDK's retry of it.
        return openai.OpenAI(base_url=self.base_url, api_key="unused", max_retries=0, **kw)

    def metric(self, name: str) -> float:
        """A series summed over every server (the engine publishes its gauges every 0.5 s)."""
        total = 0.0
        for s in self.servers:
            if s.proc.poll() is not None:
                continue
            with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=5) as r:
                text = r.read().decode()
            total += sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))
        return total

    def wait_metric(self, name: str, pred, timeout_s: float) -> tuple[bool, float]:
        t0 = time.monotonic()
        while True:
            if pred(self.metric(name)):
                return True, time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                return False, time.monotonic() - t0
            time.sleep(0.05)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    spec = load_spec(DEFAULT)
    work = tmp_path_factory.mktemp("openai")
    ports = free_ports(7)
    servers = [
        TritonProcess(
            ROOT / "model_repository",
            http_port=ports[i * 3],
            grpc_port=ports[i * 3 + 1],
            metrics_port=ports[i * 3 + 2],
            exit_timeout_s=5,
            admin_key=ADMIN_KEY,
            log_path=work / f"triton{i}.log",
        )
        for i in range(2)
    ]
    frontend = FrontendProcess(
        DEFAULT,
        port=ports[6],
        triton=[f"127.0.0.1:{s.grpc_port}" for s in servers],
        triton_http=[f"127.0.0.1:{s.http_port}" for s in servers],
        log_path=work / "frontend.log",
    )
    try:
        for s in servers:
            s.start()
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda s: s.wait_ready(600), servers))
        frontend.start().wait_ready(120)
        yield Stack(servers, frontend, str(spec.checkpoint_path()))
    finally:
        frontend.stop()
        for s in servers:
            s.stop()


def one_server_stack(work):
    """One tritonserver and a frontend in front of it (lighter than `stack`, for tests that need no
    failover), as a generator for a module fixture."""
    spec = load_spec(DEFAULT)
    http, grpc, metrics, port = free_ports(4)
    server = TritonProcess(
        ROOT / "model_repository",
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        exit_timeout_s=5,
        admin_key=ADMIN_KEY,
        log_path=work / "triton.log",
    )
    frontend = FrontendProcess(
        DEFAULT,
        port=port,
        triton=[f"127.0.0.1:{grpc}"],
        triton_http=[f"127.0.0.1:{http}"],
        log_path=work / "frontend.log",
    )
    try:
        server.start()
        server.wait_ready(600)
        frontend.start().wait_ready(120)
        yield Stack([server], frontend, str(spec.checkpoint_path()))
    finally:
        frontend.stop()
        server.stop()
