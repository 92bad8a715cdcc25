"""Failures injected under load into a real cluster (three tiny tritonservers behind HAProxy).

Loads last 15 s (the issue suggests 30 s; shortened so tests/ha stays within CI's budget on two
cores); each test prints its counts."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from llmserve.bench.mixed_load import MixedLoad

from ..conftest import ADMIN_KEY
from ..processes import load_bound

LOAD_S = 15


def lb(cluster) -> tuple[str, str]:
    return f"localhost:{cluster.http_port}", f"localhost:{cluster.grpc_port}"


def served(cluster) -> dict[str, int]:
    """Requests HAProxy sent to each server so far (HTTP + gRPC backends)."""
    st = cluster.api.stat()
    return {
        r.name: sum(int(st[(b, r.name)]["stot"] or 0) for b in ("triton_http", "triton_grpc")) for r in cluster.replicas
    }


def ensure_all_up(cluster):
    for r in cluster.replicas:
        if not r.alive():
            # restart(), not start(): it starts again after the Python backend's start-up abort on a
            # starved machine (TRANSIENT_START_ABORTS), as the supervisor does
            r.restart()
    for r in cluster.replicas:
        r.wait_ready()
    cluster.wait_all_up()


def test_forbidden_endpoints_are_403(cluster):
    http, grpc = lb(cluster)
    checks = [
        ("POST", "/v2/repository/index"),
        ("POST", "/v2/repository/models/ensemble/unload"),
        ("POST", "/v2/repository/models/ensemble/load"),
        ("GET", "/v2/logging"),
        ("POST", "/v2/logging"),
        ("GET", "/v2/trace/setting"),
        ("GET", "/v2/models/ensemble/trace/setting"),
        ("GET", "/v2/models/ensemble/stats"),
        ("GET", "/v2/models/stats"),
        ("GET", "/v2/models/ensemble/config"),
        ("GET", "/v2/systemsharedmemory/status"),
        ("GET", "/v2/cudasharedmemory/status"),
        ("GET", "/metrics"),
    ]
    codes = {}
    for method, path in checks:
        # Even with the admin key: the load balancer strips it and refuses these paths.
        r = requests.request(method, f"http://{http}{path}", headers={"llmserve-admin-key": ADMIN_KEY}, timeout=10)
        codes[f"{method} {path}"] = r.status_code
    allowed = {
        p: requests.get(f"http://{http}{p}", timeout=10).status_code
        for p in ("/v2/health/ready", "/v2/health/live", "/v2", "/v2/models/ensemble", "/v2/models/ensemble/ready")
    }
    with grpcclient.InferenceServerClient(grpc) as c:
        assert c.is_server_ready()
        with pytest.raises(InferenceServerException) as e:
            c.unload_model("ensemble", headers={"llmserve-admin-key": ADMIN_KEY})
        grpc_status = str(e.value.status())
        with pytest.raises(InferenceServerException):
            c.update_log_settings({"log_verbose_level": 1})
    print(f"\n[forbidden] HTTP: {json.dumps(codes)}\n  allowed: {allowed}\n  gRPC unload: {grpc_status}")
    assert set(codes.values()) == {403}
    assert set(allowed.values()) == {200}
    assert grpc_status == "StatusCode.PERMISSION_DENIED"
    # The model is still loaded everywhere.
    assert all(
        requests.get(f"http://localhost:{r.http_port}/v2/models/ensemble/ready").status_code == 200
        for r in cluster.replicas
    )


MALFORMED = [
    "{",
    "",
    "null",
    "[1,2]",
    '{"text_input": "hi", "max_tokens": "ten"}',
    '{"text_input": "hi", "max_tokens": 4, "stream": "yes"}',
    '{"text_input": null, "max_tokens": 4}',
    '{"text_input": "hi", "max_tokens": 4, "temperature": "hot"}',
    '{"text_input": "hi", "max_tokens": 4, "parameters": 5}',
    '{"text_input": "hi", "max_tokens": {"a": 1}}',
]


def test_malformed_json_is_400_with_tritons_message(cluster):
    http, _ = lb(cluster)
    direct = cluster.replicas[0].http_port
    rows = []
    for body in MALFORMED:
        for path in ("generate", "generate_stream"):
            via = requests.post(f"http://{http}/v2/models/ensemble/{path}", data=body, timeout=10)
            raw = requests.post(f"http://localhost:{direct}/v2/models/ensemble/{path}", data=body, timeout=10)
            rows.append((body, path, raw.status_code, via.status_code))
            assert via.status_code == 400, (body, path, via.status_code, via.text)
            assert via.json() == raw.json()  # Triton's own message, unchanged
    ok = requests.post(
        f"http://{http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 4}, timeout=30
    )
    print(
        f"\n[malformed] {len(rows)} malformed requests: direct statuses {sorted({r[2] for r in rows})}, "
        f"through HAProxy {sorted({r[3] for r in rows})}; a valid one after: {ok.status_code}"
    )
    assert ok.status_code == 200
    assert all(r.process.proc.poll() is None for r in cluster.replicas)


def test_alive_but_not_ready_server_gets_no_traffic(cluster):
    """Replica 2 (explicit model control) fails to load a model at run time: strict readiness turns
    false while the server stays alive; HAProxy takes it out; nothing reaches it."""
    http, _ = lb(cluster)
    r2 = cluster.replicas[2]
    broken = r2.repository / "broken_model"
    (broken / "1").mkdir(parents=True, exist_ok=True)
    (broken / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    (broken / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n"
        "        raise RuntimeError('this model never loads')\n"
    )
    admin = {"llmserve-admin-key": ADMIN_KEY}
    base = f"http://localhost:{r2.http_port}"
    try:
        t0 = time.monotonic()
        r = requests.post(f"{base}/v2/repository/models/broken_model/load", headers=admin, timeout=60)
        assert r.status_code != 200
        assert requests.get(f"{base}/v2/health/live").status_code == 200
        assert requests.get(f"{base}/v2/health/ready").status_code != 200
        cluster.api.wait_status(r2.name, "DOWN", 10)
        down = time.monotonic() - t0
        before = served(cluster)
        for _ in range(30):
            assert (
                requests.post(
                    f"http://{http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 4}, timeout=30
                ).status_code
                == 200
            )
        after = served(cluster)
        got = {k: after[k] - before[k] for k in after}
        print(
            f"\n[not ready] {r2.name} alive, not ready; HAProxy had it DOWN {down:.2f} s after the load request "
            f"(check {cluster.spec.ha.check.interval_ms} ms x fall {cluster.spec.ha.check.fall}); "
            f"30 requests went to: {got}"
        )
        assert got[r2.name] == 0 and sum(got.values()) == 30
    finally:
        # Recovery: the model loads once fixed; unloaded models do not count against readiness.
        (broken / "1" / "model.py").write_text(
            "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
        )
        requests.post(f"{base}/v2/repository/models/broken_model/load", headers=admin, timeout=60)
        requests.post(f"{base}/v2/repository/models/broken_model/unload", headers=admin, timeout=60)
        shutil.rmtree(broken, ignore_errors=True)
    up = cluster.api.wait_status(r2.name, "UP", 30)
    print(
        f"  ready again after unloading the failed model; UP in HAProxy after {up:.2f} s "
        f"({time.monotonic() - t0:.1f} s in all)"
    )


def test_rolling_restart_under_load_no_errors(cluster):
    ensure_all_up(cluster)
    http, grpc = lb(cluster)
    with MixedLoad(http, grpc) as load:
        time.sleep(3)
        report = cluster.rolling_restart()
        time.sleep(2)
    counts = load.report("rolling restart")
    print(f"  per server: {report}")
    assert sum(c.ok for c in counts.values()) > 20
    assert all(c.failed == 0 and c.cut == 0 for c in counts.values()), counts
    assert load.hung == 0


def test_kill_one_of_three_under_load(cluster):
    ensure_all_up(cluster)
    http, grpc = lb(cluster)
    victim = cluster.replicas[0]
    with MixedLoad(http, grpc, stream_tokens=64) as load:
        time.sleep(5)
        in_flight = cluster.api.sessions(victim.name)
        t_kill = time.monotonic()
        victim.kill()
        detect = cluster.api.wait_status(victim.name, "DOWN", 10)
        time.sleep(max(0.0, LOAD_S - (time.monotonic() - load.t0)))
    counts = load.report("kill -9 one of three")
    print(
        f"  {victim.name} killed {t_kill - load.t0:.1f} s in with {in_flight} requests in flight on it; HAProxy marked it DOWN after {detect:.2f} s; "
        f"plain streams cut on it: {counts['plain_stream'].cut}; failover streams resumed: "
        f"{counts['failover_stream'].resumed}"
    )
    assert counts["plain"].failed == 0, counts["plain"].as_dict()
    assert counts["failover_stream"].failed == 0, counts["failover_stream"].as_dict()
    assert counts["failover_unary"].failed == 0, counts["failover_unary"].as_dict()
    assert counts["plain"].ok > 10 and counts["failover_stream"].ok > 2
    assert counts["plain_stream"].failed == 0  # streams that never started were retried by HAProxy
    assert load.hung == 0


def test_all_down_clean_503_then_recovery(cluster):
    http, _ = lb(cluster)
    for r in cluster.replicas:
        if r.alive():
            r.kill()
    for r in cluster.replicas:
        cluster.api.wait_status(r.name, "DOWN", 10)
    times, codes = [], []
    for _ in range(10):
        t0 = time.monotonic()
        resp = requests.post(
            f"http://{http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 4}, timeout=10
        )
        times.append(time.monotonic() - t0)
        codes.append(resp.status_code)
    body = resp.json()
    # One server comes back: traffic resumes within the check interval x rise once it is ready.
    r = cluster.replicas[1]
    r.restart()  # until ready, starting again after a transient start-up abort
    t_ready = time.monotonic()
    while (
        requests.post(
            f"http://{http}/v2/models/ensemble/generate", json={"text_input": "hi", "max_tokens": 4}, timeout=10
        ).status_code
        != 200
    ):
        time.sleep(0.05)
    resumed = time.monotonic() - t_ready
    chk = cluster.spec.ha.check
    print(
        f"\n[all down] 10 requests: statuses {set(codes)}, slowest {max(times) * 1000:.0f} ms, body {body}; "
        f"traffic resumed {resumed:.2f} s after a server was ready (check {chk.interval_ms} ms x rise {chk.rise})"
    )
    # Bounds stretched by the load average (processes.load_bound): a busy CI machine must not fail them.
    assert set(codes) == {503} and max(times) < load_bound(1.0) and "error" in body
    assert resumed < load_bound((chk.interval_ms * (chk.rise + 1)) / 1000 + 0.5)
