"""The local launcher (deploy/tritonserver.py: serve.py, the cluster, the tests) starts tritonserver the
way docker/launch.sh does in production, for the flags that decide how models load and when the server
is ready. Without --disable-auto-complete-config the Python backend starts one extra stub per model
just to ask it for its config (importing model.py twice), which made a killed replica of the HA tests'
cluster come back UP after ~3 minutes instead of ~1 on the loaded 2-core machine."""

import re
from pathlib import Path

import pytest

from llmserve.deploy.tritonserver import ServerPaths, command
from llmserve.spec import ROOT

SHARED = ("--model-control-mode=none", "--strict-readiness=true", "--disable-auto-complete-config")


def _local() -> list[str]:
    return command(
        ServerPaths(Path("/x/tritonserver"), Path("/x/backends")),
        Path("/repo"),
        http_port=1,
        grpc_port=2,
        metrics_port=3,
        exit_timeout_s=30,
        instance_tag="t",
        admin_key="k",
    )


@pytest.mark.parametrize("flag", SHARED)
def test_local_and_production_launchers_agree(flag):
    launch = (ROOT / "docker" / "launch.sh").read_text()
    assert re.search(rf"^\s*{re.escape(flag)}\s*$", launch, re.M), f"docker/launch.sh lacks {flag}"
    assert flag in _local()
