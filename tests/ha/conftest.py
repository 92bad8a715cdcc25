"""A real cluster for the HA tests: three tiny tritonservers behind a real HAProxy, on free ports."""

from __future__ import annotations

import shutil

import pytest

from llmserve.checkpoint import build_checkpoint
from llmserve.deploy.cluster import Cluster
from llmserve.repository.writer import write_repository
from llmserve.spec import ROOT, load_spec

from ..conftest import ADMIN_KEY, free_ports

TINY = ROOT / "specs" / "tiny.yaml"
# Replica 2 runs with explicit model control so a test can make it alive-but-not-ready at run time.
EXPLICIT = ["--model-control-mode=explicit", "--load-model=*"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (scripts/setup.sh --haproxy)")
    spec = load_spec(TINY)
    build_checkpoint(spec)
    work = tmp_path_factory.mktemp("ha")
    repo = work / "model_repository"
    write_repository(spec, TINY.name, repo)
    ports = free_ports(12)
    c = Cluster(
        spec,
        repo,
        work,
        replicas=3,
        replica_ports=[tuple(ports[i * 3 : i * 3 + 3]) for i in range(3)],
        lb_ports=tuple(ports[9:12]),
        admin_key=ADMIN_KEY,
        extra={2: EXPLICIT},
    )
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()
