"""Shutdown of `serve.sh --replicas N` (llmserve.deploy.cluster) as a user runs it, each case on its
own cluster: idle SIGTERM exits within 10 s (stretched by the machine's load, processes.shutdown_bound) and leaves nothing; a SIGKILLed cluster
process leaves no HAProxy, tritonserver, stub or watchdog, and its ports are free again. Neither leaves a
/dev/shm region of its servers (the reaper removes a SIGKILLed cluster's, deploy/reaper.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from llmserve.deploy.tritonserver import is_ready
from llmserve.spec import ROOT

from ..processes import (
    free_range,
    kill_all,
    living,
    port_free,
    shm_regions,
    shutdown_bound,
    tree,
    wait_gone,
)

pytestmark = pytest.mark.e2e
REPLICAS = 2


class ClusterCLI:
    def __init__(self, work: Path):
        base = free_range(4 * REPLICAS + 4)  # + the OpenAI frontends and HAProxy's port for them
        spec = yaml.safe_load((ROOT / "specs/tiny.yaml").read_text())
        spec["name"] = "tiny-cluster-shutdown"
        spec["serving"] = {"exit_timeout_s": 30}
        spec["ha"] = {
            "replicas": REPLICAS,
            "base_http_port": base,
            "base_grpc_port": base + REPLICAS,
            "base_metrics_port": base + 2 * REPLICAS,
            "http_port": base + 3 * REPLICAS,
            "grpc_port": base + 3 * REPLICAS + 1,
            "stats_port": base + 3 * REPLICAS + 2,
            "bind": "127.0.0.1",
        }
        spec["openai"] = {"port": base + 3 * REPLICAS + 3, "base_port": base + 3 * REPLICAS + 4}
        path = work / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        self.work, self.spec_path = work, path
        self.ports = list(range(base, base + 4 * REPLICAS + 4))
        self.replica_http = list(range(base, base + REPLICAS))
        self.lb_http = base + 3 * REPLICAS
        self.log = work / "cluster.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llmserve.deploy.cluster",
                "--spec",
                str(path),
                "--repository",
                str(work / "repo"),
                "--workdir",
                str(work / "ha"),
            ],
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        t0 = time.monotonic()
        while b"ready: HAProxy" not in self.log.read_bytes():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() - t0 < 400, "cluster not ready"
            time.sleep(0.5)
        assert is_ready(self.lb_http)
        self.pids = set()
        for pid in tree(self.proc.pid):
            self.pids |= tree(pid)
        # HAProxy and the servers run in their own sessions, as children of the cluster process.

    def close(self):
        kill_all(self.pids, self.replica_http)


@pytest.fixture
def cluster_cli(tmp_path):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    c = ClusterCLI(tmp_path)
    yield c
    c.close()


def test_idle_sigterm_exits_fast_and_leaves_nothing(cluster_cli, emit):
    c = cluster_cli
    t0 = time.monotonic()
    c.proc.send_signal(signal.SIGTERM)
    rc = c.proc.wait(120)
    took = time.monotonic() - t0
    left, _ = wait_gone(c.pids, 5)
    busy_ports = [p for p in c.ports if not port_free(p)]
    regions = shm_regions(c.replica_http)
    emit(
        f"cluster ({REPLICAS} replicas + HAProxy) idle SIGTERM: exited {rc} after {took:.2f} s; "
        f"{len(c.pids)} processes before, {len(left)} left; ports still bound: {busy_ports}; "
        f"{len(regions)} /dev/shm regions left"
    )
    assert took < shutdown_bound(), f"idle shutdown took {took:.1f} s (bound {shutdown_bound():.0f} s)"
    assert not left and not busy_ports and not regions, (left, busy_ports, regions)


def test_sigkilled_cluster_process_leaves_nothing(cluster_cli, emit):
    c = cluster_cli
    n = len(living(c.pids))
    os.kill(c.proc.pid, signal.SIGKILL)
    c.proc.wait()
    left, took = wait_gone(c.pids, 10)
    busy_ports = [p for p in c.ports if not port_free(p)]
    regions = shm_regions(c.replica_http)  # the reaper removes them once it has killed their servers
    emit(
        f"cluster process SIGKILLed: {n} processes (HAProxy, tritonservers, stubs, watchdogs, reaper); "
        f"{len(left)} left after {took:.2f} s; ports still bound: {busy_ports}; {len(regions)} /dev/shm regions left"
    )
    assert not left, left
    assert not busy_ports, busy_ports
    assert not regions, regions


def test_rolling_restart_from_another_shell(cluster_cli, emit, tmp_path):
    """`python -m llmserve.deploy.cluster rolling-restart` against the running cluster process: every
    replica is restarted (new pids), the OpenAI frontends were told to leave each one alone meanwhile
    and use it again afterwards (docs/ha.md, "Rolling restart")."""
    c = cluster_cli
    state = json.loads((c.work / "ha" / "cluster.json").read_text())
    before = {n: r["pid"] for n, r in state["replicas"].items()}
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "llmserve.deploy.cluster", "rolling-restart", "--spec", str(c.spec_path)]
        + ["--workdir", str(c.work / "ha")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    took = time.monotonic() - t0
    after = {n: r["pid"] for n, r in json.loads((c.work / "ha" / "cluster.json").read_text())["replicas"].items()}
    drained = Path(state["openai_drained_file"]).read_text()
    emit(f"rolling-restart CLI: exit {r.returncode} after {took:.1f} s; pids {before} -> {after}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert all(after[n] and after[n] != before[n] for n in before), (before, after)
    assert not drained.strip(), drained
    for n in after:  # the new servers belong to the cluster process: close() ends them with the rest
        c.pids |= tree(after[n])
