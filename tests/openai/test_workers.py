"""A frontend with several worker processes (openai.workers, llmserve/openai_api/workers.py) in front of a
real tritonserver (tiny model): the workers serve (distinct pids), /metrics adds up every worker, a
worker killed with SIGKILL is replaced and its running requests leave the gauge, and SIGTERM leaves
no process and no metric files behind."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil
import pytest

from llmserve.deploy.frontend import FrontendProcess
from llmserve.deploy.tritonserver import free_ports
from llmserve.openai_api.workers import metrics_dir
from llmserve.spec import ROOT, load_spec

from ..processes import port_free, tree, wait_gone

pytestmark = pytest.mark.e2e
TINY = ROOT / "specs" / "tiny.yaml"
MODEL = load_spec(TINY).name
WORKERS = 3


def worker_pids(frontend: FrontendProcess) -> set[int]:
    """The supervisor's spawned workers (not multiprocessing's resource tracker)."""
    out = set()
    for c in psutil.Process(frontend.proc.pid).children():
        try:
            if any("spawn_main" in a for a in c.cmdline()) and c.status() != psutil.STATUS_ZOMBIE:
                out.add(c.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_started(frontend: FrontendProcess, n: int, timeout_s: float = 600) -> None:
    """Until n workers in all have finished starting (uvicorn's line per worker; a worker imports the
    app for seconds, a minute on a loaded machine, and answers nothing before)."""
    t0 = time.monotonic()
    while frontend.log.read_text().count("Application startup complete.") < n:
        assert frontend.proc.poll() is None, frontend.log.read_text()[-3000:]
        assert time.monotonic() - t0 < timeout_s, f"fewer than {n} workers started\n{frontend.log.read_text()[-3000:]}"
        time.sleep(0.2)


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def complete(port: int) -> int:
    """One streamed completion on a connection of its own; its completion tokens."""
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0) as c:
        stream = c.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=16, stream=True, stream_options={"include_usage": True}
        )
        usage = [chunk.usage for chunk in stream if chunk.usage]
    return usage[-1].completion_tokens


@pytest.fixture(scope="module")
def frontend(tiny_server, tmp_path_factory):
    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("workers") / "frontend.log"
    f = FrontendProcess(
        TINY, port=port, triton=[tiny_server.grpc], triton_http=[tiny_server.http], log_path=log, workers=WORKERS
    )
    f.log = log
    try:
        f.start().wait_ready(300)
        wait_started(f, WORKERS)  # ready = one worker answers; the others may still import
        yield f
    finally:
        f.stop()


def test_workers_serve_and_metrics_add_up(frontend, emit):
    port = frontend.port
    requests0 = metric(port, "llmserve_api_request_success_total")
    tokens0 = metric(port, "llmserve_api_generation_tokens_total")
    n = 36
    with ThreadPoolExecutor(12) as ex:
        tokens = list(ex.map(lambda _: complete(port), range(n)))
    # Each worker writes its counts to files named by its pid: which workers served.
    served = {
        int(m.group(1)) for f in metrics_dir(port).glob("counter_*.db") if (m := re.search(r"_(\d+)\.db$", f.name))
    }
    workers = worker_pids(frontend)
    emit(f"{WORKERS} workers {sorted(workers)}: {n} requests served by {len(served & workers)} of them")
    assert len(workers) == WORKERS
    assert len(served & workers) >= 2, (served, workers)
    # One access line per request, each with its own request id, whichever worker served it.
    ids = re.findall(r"\[(req-[0-9a-f]{32})\] POST /v1/completions 200 ", frontend.log.read_text())
    assert len(ids) == len(set(ids)) >= n
    # The workers share the ids in flight (a file each, access.InflightIds): all released now.
    assert (metrics_dir(port) / "inflight").is_dir() and not list((metrics_dir(port) / "inflight").iterdir())
    # Whichever worker answers /metrics, it reports every worker's counts.
    for _ in range(WORKERS * 2):
        assert metric(port, "llmserve_api_request_success_total") - requests0 == n
        assert metric(port, "llmserve_api_generation_tokens_total") - tokens0 == sum(tokens)
        assert metric(port, "llmserve_api_num_requests_running") == 0


def test_a_killed_worker_is_replaced(frontend, emit):
    port = frontend.port
    before = worker_pids(frontend)
    victim = min(before)
    t0 = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    ok = sum(complete(port) > 0 for _ in range(8))  # the others keep serving meanwhile
    wait_started(frontend, WORKERS + 1)  # its replacement serves
    replaced = time.monotonic() - t0
    after = worker_pids(frontend)
    emit(
        f"kill -9 of worker {victim}: replaced by {sorted(after - before)}, serving after {replaced:.1f} s; {ok}/8 served"
    )
    assert ok == 8 and victim not in after and len(after - before) == 1
    assert metric(port, "llmserve_api_num_requests_running") == 0


def test_sigterm_drains_the_streams_and_leaves_nothing(frontend, emit):
    port, folder = frontend.port, metrics_dir(frontend.port)
    assert folder.is_dir()
    pids = tree(frontend.proc.pid)
    # A stream under way when SIGTERM comes is finished, not cut (each worker drains its own).
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0) as c:
        stream = c.completions.create(
            model=MODEL,
            prompt="Once upon a time",
            max_tokens=200,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"min_tokens": 200},
        )
        chunks = iter(stream)
        next(chunks)
        t0 = time.monotonic()
        frontend.proc.send_signal(signal.SIGTERM)
        usage = [chunk.usage for chunk in chunks if chunk.usage]
    rc = frontend.proc.wait(300)
    left, _ = wait_gone(pids, 10)
    emit(
        f"SIGTERM during a stream: the stream ended with {usage[-1].completion_tokens} tokens; exited {rc} after "
        f"{time.monotonic() - t0:.2f} s, {len(pids)} processes before, {len(left)} left"
    )
    assert usage[-1].completion_tokens == 200
    assert rc == 0 and not left, left
    assert not folder.exists(), "the metric files were left behind"
    assert port_free(port)


def test_a_killed_supervisor_takes_its_workers_and_the_next_start_clears_its_files(tiny_server, tmp_path, emit):
    """SIGKILL of the supervisor alone (not its process group): its workers end with it (PR_SET_PDEATHSIG),
    and the metric files it leaves are cleared by the next frontend on that port."""
    port = free_ports(1)[0]
    f = FrontendProcess(
        TINY,
        port=port,
        triton=[tiny_server.grpc],
        triton_http=[tiny_server.http],
        log_path=tmp_path / "a.log",
        workers=2,
    )
    f.log = tmp_path / "a.log"
    try:
        f.start().wait_ready(300)
        wait_started(f, 2)
        complete(port)
        children = tree(f.proc.pid) - {f.proc.pid}  # the workers and multiprocessing's resource tracker
        assert worker_pids(f) <= children
        os.kill(f.proc.pid, signal.SIGKILL)
        left, waited = wait_gone(children, 60)
        emit(f"SIGKILL of the supervisor: its {len(children)} children gone after {waited:.1f} s, {len(left)} left")
        assert not left, left
        assert list(metrics_dir(port).glob("*.db")), "the killed frontend's files should still be there"
    finally:
        f.stop()
    g = FrontendProcess(
        TINY,
        port=port,
        triton=[tiny_server.grpc],
        triton_http=[tiny_server.http],
        log_path=tmp_path / "b.log",
        workers=2,
    )
    try:
        g.start().wait_ready(300)
        assert metric(port, "llmserve_api_request_success_total") == 0  # not the killed frontend's count
    finally:
        g.stop()
    assert not metrics_dir(port).exists()
