"""The fuzz target: the tiny server from tests/conftest.py, or an already running deployment named by
LLMSERVE_FUZZ_HTTP=host:port / LLMSERVE_FUZZ_GRPC=host:port (e.g. a server behind HAProxy)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass
class Target:
    http: str
    grpc: str
    log: str | None


@pytest.fixture(scope="session")
def fuzz_target(request) -> Target:
    if os.environ.get("LLMSERVE_FUZZ_HTTP"):
        return Target(
            os.environ["LLMSERVE_FUZZ_HTTP"],
            os.environ.get("LLMSERVE_FUZZ_GRPC", ""),
            os.environ.get("LLMSERVE_FUZZ_LOG"),
        )
    server = request.getfixturevalue("tiny_server")
    return Target(server.http, server.grpc, str(server.log))
