"""Busy means 503 everywhere, and HAProxy sends it elsewhere: a replica whose engine is full answers
"server busy" (HTTP 400 from Triton's generate endpoint); its relay turns that into 503, which the
backend retries on another replica, so a client behind HAProxy is served while any replica has room.
Its own small cluster: two replicas of one engine slot and a queue of one each."""

from __future__ import annotations

import re
import shutil
import threading
import time

import pytest
import requests
import yaml

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.cluster import Cluster
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from ..conftest import ADMIN_KEY, free_ports

pytestmark = pytest.mark.e2e
LONG = {"text_input": "Count", "max_tokens": 250, "min_tokens": 250}


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    work = tmp_path_factory.mktemp("ha-busy")
    doc = yaml.safe_load((ROOT / "specs/tiny.yaml").read_text())
    doc["name"] = "tiny-busy"
    doc["engine"].update(max_batch_size=1, queue={"max_queue_delay_us": 0, "max_queue_size": 1})
    doc["serving"] = {"exit_timeout_s": 10, "unary_twins": False}
    path = work / "tiny-busy.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_spec(path)
    build_checkpoint(spec)
    repo = work / "model_repository"
    write_repository(spec, path.name, repo)
    ports = free_ports(9)
    c = Cluster(spec, repo, work, replicas=2, replica_ports=[tuple(ports[0:3]), tuple(ports[3:6])],
                lb_ports=tuple(ports[6:9]), admin_key=ADMIN_KEY)
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


def _gauge(replica, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{replica.ports[2]}/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_busy_replica_request_is_served_by_another(small_cluster, emit):
    c = small_cluster
    full = c.replicas[0]
    direct = f"http://127.0.0.1:{full.http_port}/v2/models/ensemble/generate"
    busy_threads = [threading.Thread(target=lambda: requests.post(direct, json=LONG, timeout=300), daemon=True)
                    for _ in range(2)]  # one generating, one waiting: replica 0 is full
    for t in busy_threads:
        t.start()
        time.sleep(0.2)
    t0 = time.monotonic()
    while not (_gauge(full, "llmserve_requests_running") >= 1 and _gauge(full, "llmserve_requests_waiting") >= 1):
        assert time.monotonic() - t0 < 60, "replica 0 never filled up"
        time.sleep(0.05)
    refused = requests.post(direct, json={"text_input": "hi", "max_tokens": 1}, timeout=60)
    assert refused.status_code != 200 and "busy" in refused.text.lower(), refused.text
    before = c.api.stat()
    results = [requests.post(f"http://127.0.0.1:{c.http_port}/v2/models/ensemble/generate",
                             json={"text_input": "hi", "max_tokens": 2}, timeout=120) for _ in range(6)]
    after = c.api.stat()
    retried = {name: int(after[("triton_http", name)]["wretr"] or 0) - int(before[("triton_http", name)]["wretr"] or 0)
               for name in ("triton0", "triton1")}
    redispatched = sum(int(after[("triton_http", n)]["wredis"] or 0) - int(before[("triton_http", n)]["wredis"] or 0)
                       for n in ("triton0", "triton1"))
    codes = [r.status_code for r in results]
    emit(f"replica 0 full (direct answer {refused.status_code}: {refused.text[:80]}); 6 requests through "
         f"HAProxy: statuses {codes}; retries per server {retried}, redispatches {redispatched}")
    assert codes == [200] * 6, [r.text[:200] for r in results]
    for t in busy_threads:
        t.join(300)
