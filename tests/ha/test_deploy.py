"""deploy/: the generated haproxy.cfg has not drifted and HAProxy accepts it; Kubernetes manifests
validate (kubernetes-validate, strict); compose gives Triton more time to stop than it drains; the
timing rules of the issue hold (grace period > preStop + exit timeout, exit timeout >= spec's)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from llmserve.deploy.haproxy import Backend, render
from llmserve.spec import ROOT, load_spec

DEPLOY = ROOT / "deploy"
SPEC = load_spec(ROOT / "specs" / "default.yaml")


def test_haproxy_cfg_matches_spec_and_is_valid():
    s = SPEC.serving
    want = render(
        SPEC,
        [Backend(f"triton{i}", f"triton{i}", s.http_port, s.grpc_port) for i in range(3)],
        label="default.yaml",
        stats_socket="/var/run/haproxy/admin.sock",
    )
    have = (DEPLOY / "haproxy.cfg").read_text()
    body = lambda t: [ln for ln in t.splitlines() if not ln.startswith("#")]  # noqa: E731
    assert body(have) == body(want), "deploy/haproxy.cfg drifted: regenerate it (command in its header)"
    if shutil.which("haproxy"):
        r = subprocess.run(["haproxy", "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_kubernetes_manifests_validate():
    kv = pytest.importorskip("kubernetes_validate")
    files = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
    assert {f.name for f in files} >= {"deployment.yaml", "service.yaml", "pdb.yaml", "hpa.yaml"}
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            kv.validate(doc, "1.30.0", strict=True)
    print(f"\n[kubernetes] {len(files)} manifests valid (kubernetes-validate, strict, 1.30.0)")


def test_kubernetes_shutdown_timing():
    dep = yaml.safe_load((DEPLOY / "kubernetes" / "deployment.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    exit_s = int(env["EXIT_TIMEOUT_S"])
    pre_stop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    ready = c["readinessProbe"]
    assert exit_s >= SPEC.serving.exit_timeout_s
    assert pre_stop >= ready["periodSeconds"] * ready["failureThreshold"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + exit_s
    for probe, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert c[probe]["httpGet"]["path"] == path
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_compose_file():
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    tritons = [k for k in doc["services"] if k.startswith("triton")]
    assert len(tritons) == 3 and "haproxy" in doc["services"]
    for k in tritons:
        svc = doc["services"][k]
        assert int(svc["stop_grace_period"].rstrip("s")) > int(svc["environment"]["EXIT_TIMEOUT_S"])
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in doc["services"]["haproxy"]["volumes"]
