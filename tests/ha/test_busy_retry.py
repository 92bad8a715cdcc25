"""Busy means 503 everywhere, and HAProxy sends it elsewhere: a replica whose engine is full answers
"server busy" (HTTP 400 from Triton's generate endpoint); its relay turns that into 503, which the
backend retries on another replica, so a client behind HAProxy is served while any replica has room.
Its own small cluster: two replicas of one engine slot and a queue of one each.

Replica 0 is filled by two requests sent to it directly (one generating, one waiting). They must
outlast everything the test does while it is full, on any machine: a fixed length does not do that
(250 tokens of the tiny model take about 0.3 s on an idle machine, less than one 0.5 s publication
of the engine gauges, so the test once waited for a full replica that had already emptied). So they
ask for OCCUPY_TOKENS (about a minute on an idle machine, longer on a loaded one, where the test's
own requests slow down as much), carry request ids, and are cancelled by id (`stop`) once the test
is done; no step waits on a wall-clock bound, only on the requests and the engine's gauges."""

from __future__ import annotations

import re
import shutil
import threading

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import yaml

from llmserve.checkpoint import build_checkpoint
from llmserve.contract import ENGINE
from llmserve.deploy.cluster import Cluster
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from ..conftest import ADMIN_KEY, free_ports

pytestmark = pytest.mark.e2e
OCCUPY_TOKENS = 40000  # ~1.3 ms a token on the tiny model on an idle 2-core machine: about a minute
MAX_INPUT = 64


@pytest.fixture(scope="module")
def small_cluster(tmp_path_factory):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    work = tmp_path_factory.mktemp("ha-busy")
    doc = yaml.safe_load((ROOT / "specs/tiny.yaml").read_text())
    doc["name"] = "tiny-busy"
    # Its own checkpoint: the shared tiny one has 4,096 positions, fewer than an occupying request needs.
    doc["model"]["checkpoint_dir"] = str(work / "checkpoint")
    doc["engine"].update(
        max_batch_size=1,
        max_input_len=MAX_INPUT,
        max_output_len=OCCUPY_TOKENS,
        queue={"max_queue_delay_us": 0, "max_queue_size": 1},
    )
    doc["serving"] = {"exit_timeout_s": 10, "unary_twins": False}
    path = work / "tiny-busy.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = load_spec(path)
    build_checkpoint(spec)
    repo = work / "model_repository"
    write_repository(spec, path.name, repo)
    ports = free_ports(9)
    c = Cluster(
        spec,
        repo,
        work,
        replicas=2,
        replica_ports=[tuple(ports[0:3]), tuple(ports[3:6])],
        lb_ports=tuple(ports[6:9]),
        admin_key=ADMIN_KEY,
    )
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


def _gauge(replica, name: str) -> float:
    text = requests.get(f"http://127.0.0.1:{replica.ports[2]}/metrics", timeout=30).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


class Occupier(threading.Thread):
    """One long request straight to a replica; `answer` is set when it is answered (or fails)."""

    def __init__(self, url: str, key: str):
        super().__init__(daemon=True)
        self.url, self.key = url, key
        self.answered = threading.Event()
        self.answer = ""

    def run(self) -> None:
        body = {"id": self.key, "text_input": "Count", "max_tokens": OCCUPY_TOKENS, "min_tokens": OCCUPY_TOKENS}
        try:
            r = requests.post(self.url, json=body, timeout=3600)
            self.answer = f"{r.status_code} {r.text[:200]}"
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.answer = repr(e)
        finally:
            self.answered.set()


def _stop(replica, keys) -> None:
    """Upstream's cancel by request id, sent to the engine model (a waiting request is dropped too)."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{replica.ports[1]}")
    done = threading.Semaphore(0)
    client.start_stream(callback=lambda result, error: done.release())
    try:
        for key in keys:
            inputs = [
                grpcclient.InferInput(n, [1, 1], d).set_data_from_numpy(np.array([[v]], dtype=t))
                for n, v, d, t in (
                    ("input_ids", 0, "INT32", np.int32),
                    ("input_lengths", 1, "INT32", np.int32),
                    ("request_output_len", 1, "INT32", np.int32),
                    ("stop", True, "BOOL", bool),
                )
            ]
            client.async_stream_infer(ENGINE, inputs, request_id=key, enable_empty_final_response=True)
            done.acquire(timeout=60)  # the stop's one empty final answer (if it never comes, teardown ends all)
    finally:
        client.stop_stream()
        client.close()


def test_busy_replica_request_is_served_by_another(small_cluster, emit):
    c = small_cluster
    full = c.replicas[0]
    direct = f"http://127.0.0.1:{full.http_port}/v2/models/ensemble/generate"
    occupiers = [Occupier(direct, f"busy-{i}") for i in range(2)]  # one generating, one waiting
    try:
        occupiers[0].start()
        # The second only once the first holds the slot: sent together, either could be the one refused.
        while _gauge(full, "llmserve_requests_running") < 1:
            assert not occupiers[0].answered.wait(0.05), f"the first request ended early: {occupiers[0].answer}"
        occupiers[1].start()
        while _gauge(full, "llmserve_requests_waiting") < 1:
            ended = [o for o in occupiers if o.answered.is_set()]
            assert not ended, f"replica 0 never filled up: a request ended first: {ended[0].answer}"
            occupiers[1].answered.wait(0.05)
        refused = requests.post(direct, json={"text_input": "hi", "max_tokens": 1}, timeout=300)
        assert refused.status_code != 200 and "busy" in refused.text.lower(), refused.text
        before = c.api.stat()
        results = [
            requests.post(
                f"http://127.0.0.1:{c.http_port}/v2/models/ensemble/generate",
                json={"text_input": "hi", "max_tokens": 2},
                timeout=300,
            )
            for _ in range(6)
        ]
        after = c.api.stat()
        # Replica 0 was full all along: neither of its requests has been answered yet.
        still = [o.answered.is_set() for o in occupiers]
    finally:
        _stop(full, [o.key for o in occupiers])
        for o in occupiers:
            o.answered.wait(300)
    retried = {
        name: int(after[("triton_http", name)]["wretr"] or 0) - int(before[("triton_http", name)]["wretr"] or 0)
        for name in ("triton0", "triton1")
    }
    redispatched = sum(
        int(after[("triton_http", n)]["wredis"] or 0) - int(before[("triton_http", n)]["wredis"] or 0)
        for n in ("triton0", "triton1")
    )
    codes = [r.status_code for r in results]
    emit(
        f"replica 0 full (direct answer {refused.status_code}: {refused.text[:80]}); 6 requests through "
        f"HAProxy: statuses {codes}; retries per server {retried}, redispatches {redispatched}; "
        f"occupying requests, cancelled after: {[o.answer[:60] for o in occupiers]}"
    )
    assert not any(still), f"an occupying request ended while the test ran: {[o.answer for o in occupiers]}"
    assert codes == [200] * 6, [r.text[:200] for r in results]
    assert retried["triton0"] >= 1, "no request was sent to the full replica: the busy path was not exercised"
