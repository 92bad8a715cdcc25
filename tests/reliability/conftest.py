"""Small-capacity tiny servers for the reliability tests: 2 engine slots, a queue of 4 and long
outputs (so a request runs for seconds and can be cancelled mid-way). A request timeout decides
what a test can see, so servers are shared only where it suits both: `capacity_server` (overload and
cancellation; its 600 s timeout is far above the overload burst's service time and far above any
cancellation bound, so neither "busy" nor "cancelled" can be a timeout in disguise; each test first
waits for the engine to be idle), and the timeout test's own server (3 s)."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from llmserve.spec import ROOT

try:  # tests/ is a package in some checkouts, a plain rootdir conftest in others
    from tests.conftest import start_server, stop
except ImportError:
    from conftest import start_server, stop

MAX_BATCH, QUEUE, MAX_OUT = 2, 4, 4000  # 4,000 tokens: ~5 s on the tiny model on an idle machine
SHARED_POSITIONS = 4096  # the shared tiny checkpoint's max_position_embeddings (checkpoint.py)
# A wait that ends when its event comes (a gauge, a counter): the timeout only says how long a failing
# test hangs, so it is generous; what a test asserts about time is measured, not this.
EVENT_TIMEOUT_S = 120


def reliability_spec(
    path: Path, *, timeout_s: float, max_batch=MAX_BATCH, queue=QUEUE, max_out=MAX_OUT, engine_process=False
) -> Path:
    spec = yaml.safe_load((ROOT / "specs/tiny.yaml").read_text())
    spec["name"] = path.stem
    if 64 + max_out > SHARED_POSITIONS:  # a random checkpoint of its own, with positions enough
        spec["model"]["checkpoint_dir"] = str(path.parent / "checkpoint")
    spec["engine"].update(
        max_batch_size=max_batch,
        max_input_len=64,
        max_output_len=max_out,
        queue={"max_queue_delay_us": 0, "max_queue_size": queue},
    )
    spec["engine"].setdefault("torch", {})["engine_process"] = engine_process
    spec["serving"] = {"exit_timeout_s": 5, "request_timeout_s": timeout_s}
    path.write_text(yaml.safe_dump(spec))
    return path


def reliability_server(
    tmp_path_factory, name: str, *, timeout_s: float, max_out: int = MAX_OUT, engine_process: bool = False
):
    """Start one (the caller's module-scoped fixture stops it)."""
    work = tmp_path_factory.mktemp(name)
    path = reliability_spec(work / f"{name}.yaml", timeout_s=timeout_s, max_out=max_out, engine_process=engine_process)
    return start_server(path, work)


CAPACITY_TIMEOUT_S = 600.0


@pytest.fixture(scope="package")
def capacity_server(tmp_path_factory):
    server = reliability_server(tmp_path_factory, "tiny-capacity", timeout_s=CAPACITY_TIMEOUT_S)
    yield server
    stop(server)


@pytest.fixture(scope="package")
def process_capacity_server(tmp_path_factory):
    """capacity_server with the engine in a process of its own (engine.torch.engine_process)."""
    server = reliability_server(
        tmp_path_factory, "tiny-capacity-process", timeout_s=CAPACITY_TIMEOUT_S, engine_process=True
    )
    yield server
    stop(server)


def metric(server, name: str) -> float:
    """Sum of a Prometheus series over its labels (engine gauges are per model)."""
    with urllib.request.urlopen(server.metrics, timeout=5) as r:
        text = r.read().decode()
    values = [float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    if not values:
        raise KeyError(f"{name} not in {server.metrics}")
    return sum(values)


def wait_metric(server, name: str, pred, timeout_s: float, period_s: float = 0.05) -> tuple[bool, float]:
    """(reached, seconds waited) until pred(value) holds."""
    t0 = time.monotonic()
    while True:
        try:
            value = metric(server, name)
        except (OSError, KeyError):  # the metrics port or the engine's series not up yet: not reached
            value = None
        if value is not None and pred(value):
            return True, time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return False, time.monotonic() - t0
        time.sleep(period_s)


def long_request(tokens: int = MAX_OUT) -> dict:
    """A request that runs for seconds: min_tokens == max_tokens, so no early end token."""
    return {"text_input": "Count to a million", "max_tokens": tokens, "min_tokens": tokens}


def rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants (the Python stubs), in kB."""
    import psutil

    total = 0
    try:
        p = psutil.Process(pid)
        for q in [p, *p.children(recursive=True)]:
            try:
                total += q.memory_info().rss // 1024
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total
