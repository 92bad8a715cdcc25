"""/metrics with several workers (llmserve/openai_api/workers.py): prometheus_client's multiprocess mode
adds up the series every worker process wrote; the running gauge counts living workers only. Real
processes (spawned, as uvicorn's supervisor does), no server."""

from __future__ import annotations

import multiprocessing
import os
import re

from prometheus_client.multiprocess import mark_process_dead

from llmserve.openai_api.metrics import Metrics

CODE_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _worker(tokens: int, running: int) -> None:
    m = Metrics("m", 128)
    m.generation_tokens.inc(tokens)
    m.success["length"].inc()
    for _ in range(running):
        m.running.inc()


def _value(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _render(folder) -> str:
    """What GET /metrics answers in a worker (Metrics.render with the folder set)."""
    os.environ[CODE_ENV] = str(folder)
    try:
        return Metrics("m", 128).render().decode()
    finally:
        del os.environ[CODE_ENV]


def test_metrics_add_up_across_worker_processes(tmp_path, monkeypatch):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(t, r)) for t, r in ((5, 1), (7, 2))]
    with monkeypatch.context() as env:  # inherited: set before a worker imports prometheus_client
        env.setenv(CODE_ENV, str(tmp_path))
        for p in procs:
            p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    text = _render(tmp_path)
    assert _value(text, "llmserve_api_generation_tokens_total") == 12
    assert _value(text, "llmserve_api_request_success_total") == 2
    assert _value(text, "llmserve_api_num_requests_running") == 3  # until the supervisor marks them dead
    for p in procs:
        mark_process_dead(p.pid, str(tmp_path))
    text = _render(tmp_path)
    assert _value(text, "llmserve_api_generation_tokens_total") == 12  # counts of dead workers stay
    assert _value(text, "llmserve_api_num_requests_running") == 0  # their running requests do not
