"""`serve.sh --replicas N` for OpenAI clients: N frontends behind HAProxy's `openai` frontend, each
sending to every Triton replica (tiny model, two replicas). kill -9 of a Triton replica under
streaming load through HAProxy: no request fails and no stream is cut."""

from __future__ import annotations

import shutil
import threading

import openai
import pytest
import requests

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.cluster import Cluster
from llmserve.deploy.tritonserver import free_ports
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

pytestmark = pytest.mark.e2e
TINY = ROOT / "specs" / "tiny.yaml"
TOKENS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    spec = load_spec(TINY)
    build_checkpoint(spec)
    work = tmp_path_factory.mktemp("openai-cluster")
    repo = work / "model_repository"
    write_repository(spec, TINY.name, repo)
    ports = free_ports(12)
    spec = spec.model_copy(update={"openai": spec.openai.model_copy(update={"port": ports[11]})})
    c = Cluster(
        spec,
        repo,
        work,
        replicas=2,
        replica_ports=[tuple(ports[i * 3 : i * 3 + 3]) for i in range(2)],
        lb_ports=tuple(ports[6:9]),
        openai_ports=ports[9:11],
    )
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


def base(cluster) -> str:
    return f"http://127.0.0.1:{cluster.spec.openai.port}"


def test_only_v1_and_health_pass_the_load_balancer(cluster):
    assert requests.get(base(cluster) + "/health", timeout=30).status_code == 200
    assert requests.get(base(cluster) + "/metrics", timeout=30).status_code == 403
    models = openai.OpenAI(base_url=base(cluster) + "/v1", api_key="x", max_retries=0).models.list()
    assert [m.id for m in models.data] == [cluster.spec.name]


def test_kill_9_of_a_triton_replica_under_streaming_load(cluster, emit):
    c = openai.OpenAI(base_url=base(cluster) + "/v1", api_key="x", max_retries=0, timeout=300)
    n = 6
    started = threading.Barrier(n + 1)
    results: list = [None] * n

    def client(i):
        try:
            stream = c.completions.create(
                model=cluster.spec.name,
                prompt=f"Count {i}",
                max_tokens=TOKENS,
                stream=True,
                stream_options={"include_usage": True},
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            reason, usage = None, None
            for k, ch in enumerate(stream):
                if ch.choices:
                    reason = ch.choices[0].finish_reason or reason
                if ch.usage:
                    usage = ch.usage.completion_tokens
                if k == 5:
                    started.wait()
            results[i] = (reason, usage)
        except Exception as e:  # noqa: BLE001 - every failure is a result to report
            results[i] = e
            started.abort()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    started.wait(timeout=300)
    cluster.replicas[0].kill()
    for t in threads:
        t.join(300)
    failed = [r for r in results if not isinstance(r, tuple)]
    cut = [r for r in results if isinstance(r, tuple) and r != ("length", TOKENS)]
    emit(
        f"kill -9 of one of two Triton replicas under {n} streams through HAProxy -> frontends: "
        f"{len(failed)} failed, {len(cut)} cut"
    )
    assert not failed and not cut, results


def test_rolling_restart_under_openai_load(cluster, emit):
    """The frontends send to every replica directly, past HAProxy's drain: the rolling restart tells
    them to leave each replica alone before it stops it, so no OpenAI request fails and no replica's
    stop waits out its exit timeout (a request reaching a stopping server can hold its engine model
    loaded that long: docs/cancellation.md section 4)."""
    for r in cluster.replicas:  # the previous test's kill (no supervisor runs here): back and UP first
        if not r.alive():
            r.restart()  # until ready, starting again after a transient start-up abort (a starved machine)
        r.wait_ready(600)
        cluster.api.wait_status(r.name, "UP", 600)
    logs = {r.name: r.kw["log_path"] for r in cluster.replicas}
    offsets = {n: p.stat().st_size for n, p in logs.items()}
    c = openai.OpenAI(base_url=base(cluster) + "/v1", api_key="x", max_retries=0, timeout=300)
    stop, ok, failed = threading.Event(), [0], []

    def client(i):
        while not stop.is_set():
            try:
                r = c.completions.create(model=cluster.spec.name, prompt=f"Count {i}", max_tokens=16, temperature=0)
                ok[0] += bool(r.choices[0].text is not None)
            except Exception as e:  # noqa: BLE001 - every failure is a result to report
                failed.append(repr(e)[:200])

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    report = cluster.rolling_restart()
    stop.set()
    for t in threads:
        t.join(300)
    expired = [n for n, p in logs.items() if b"Exit timeout expired" in p.read_bytes()[offsets[n] :]]
    emit(
        f"rolling restart of 2 replicas under 4 OpenAI clients through HAProxy -> frontends: {ok[0]} ok, "
        f"{len(failed)} failed; per server {report}; exit timeouts: {expired}"
    )
    assert not failed, failed[:3]
    assert ok[0] > 0 and not expired
    assert not cluster.frontends.drained_file.read_text().strip()  # every replica is used again
