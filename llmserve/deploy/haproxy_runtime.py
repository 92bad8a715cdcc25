"""HAProxy's runtime API (the admin stats socket) and the rolling restart built on it.

A rolling restart, one server at a time:

  1. `set server triton_http/<s> state drain`: no new requests (the gRPC server tracks the HTTP one,
     so it drains too); in-flight requests and streams go on; clients that reach the servers
     directly (the cluster's OpenAI frontends) are told to send it nothing new either;
  2. wait until HAProxy counts 0 sessions on it (both backends), at most drain_timeout_s, and at
     least until those clients have had the time to notice;
  3. `state maint` (no more checks or pooled connections), then restart(name): SIGTERM, Triton
     finishes what is left (up to serving.exit_timeout_s) and exits, and is started again;
  4. once it is ready, the direct clients may use it again, `state ready`, and wait until HAProxy
     has it UP;
  5. next server.

deploy/cluster.py runs it in-process (Cluster.rolling_restart) or against a running cluster from
another shell (`python -m llmserve.deploy.cluster rolling-restart`).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .haproxy import GRPC_BACKEND, HTTP_BACKEND

logger = logging.getLogger(__name__)
STATES = ("ready", "drain", "maint")


def state_command(server: str, state: str, backend: str = HTTP_BACKEND) -> str:
    """The runtime-API line that puts a server into `state`; ready | drain | maint."""
    if state not in STATES:
        raise ValueError(f"haproxy server state must be one of {', '.join(STATES)}, not {state!r}")
    return f"set server {backend}/{server} state {state}"


def parse_stat(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """`show stat` (CSV, a `# pxname,svname,...` header) as {(backend, server): row}, servers only."""
    lines = text.strip().splitlines()
    if not lines:
        return {}
    header = lines[0].lstrip("# ").split(",")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("svname") not in ("FRONTEND", "BACKEND"):
            rows[(row["pxname"], row["svname"])] = row
    return rows


class RuntimeAPI:
    """HAProxy's runtime API over the admin stats socket (one command per connection)."""

    def __init__(self, path: str | Path):
        self.path = str(path)

    def cmd(self, line: str, timeout: float = 5.0) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(self.path)
            s.sendall(line.encode() + b"\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        return b"".join(chunks).decode()

    def stat(self) -> dict[tuple[str, str], dict[str, str]]:
        """`show stat` as {(backend, server): row} (rows for servers only)."""
        return parse_stat(self.cmd("show stat"))

    def set_state(self, server: str, state: str) -> None:
        """state: ready | drain | maint. Set on the HTTP backend; the tracking gRPC server follows."""
        out = self.cmd(state_command(server, state)).strip()
        if out:  # HAProxy answers nothing when the command succeeded
            raise RuntimeError(f"haproxy: set server {server} state {state}: {out}")

    def in_flight(self, backends: list[str]) -> int:
        """Requests on these backends' servers or waiting in their queues. Not the frontends' sessions:
        those count a client's idle keep-alive connection too, for as long as it stays open."""
        return sum(
            int(row.get("scur") or 0) + int(row.get("qcur") or 0)
            for (backend, _), row in self.stat().items()
            if backend in backends
        )

    def disable_frontend(self, name: str) -> None:
        """Stop accepting new connections on it (what a soft stop does first); those in flight go on."""
        out = self.cmd(f"disable frontend {name}").strip()
        if out:
            raise RuntimeError(f"haproxy: disable frontend {name}: {out}")

    def sessions(self, server: str) -> int:
        st = self.stat()
        return sum(int(st[(b, server)]["scur"] or 0) for b in (HTTP_BACKEND, GRPC_BACKEND) if (b, server) in st)

    def status(self, server: str, backend: str = HTTP_BACKEND) -> str:
        return self.stat()[(backend, server)]["status"]

    def wait_status(self, server: str, want: str = "UP", timeout_s: float = 60, backend: str = HTTP_BACKEND) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.status(server, backend) == want:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise TimeoutError(
            f"haproxy: {backend}/{server} not {want} after {timeout_s} s (is {self.status(server, backend)})"
        )


@dataclass
class ClientDrain:
    """Clients that send to the servers directly: drain(name) stops their new requests to it within
    settle_s; undrain(name) lifts that."""

    drain: Callable[[str], None]
    undrain: Callable[[str], None]
    settle_s: float


def rolling_restart(
    api: RuntimeAPI,
    names: list[str],
    restart: Callable[[str], None],
    *,
    drain_timeout_s: float,
    up_timeout_s: float = 120,
    clients: ClientDrain | None = None,
) -> list[dict]:
    """Restart each server in turn without failing or cutting a request (see the module docstring).
    restart(name) must stop the server (SIGTERM) and return once it is ready again. clients: those
    that reach the servers without HAProxy (the cluster's OpenAI frontends), drained alongside and
    given settle_s to notice before the server is stopped."""
    report = []
    for name in names:
        t0 = time.monotonic()
        api.set_state(name, "drain")
        if clients is not None:
            clients.drain(name)
        logger.info("%s: draining (%d sessions)", name, api.sessions(name))
        settle_until = t0 + (clients.settle_s if clients is not None else 0.0)
        while (api.sessions(name) > 0 and time.monotonic() - t0 < drain_timeout_s) or time.monotonic() < settle_until:
            time.sleep(0.1)
        left = api.sessions(name)
        drained = time.monotonic() - t0
        logger.info(
            "%s: drained in %.1f s%s",
            name,
            drained,
            f" ({left} sessions still open: Triton finishes them on SIGTERM)" if left else "",
        )
        api.set_state(name, "maint")
        try:
            restart(name)
        finally:  # a server that did not come back is not ready either: their own checks keep them off it
            if clients is not None:
                clients.undrain(name)
        api.set_state(name, "ready")
        up = api.wait_status(name, "UP", up_timeout_s)
        total = time.monotonic() - t0
        logger.info("%s: back UP in HAProxy %.1f s after ready; %.1f s in all", name, up, total)
        report.append({"server": name, "drain_s": round(drained, 2), "left_sessions": left, "total_s": round(total, 2)})
    return report
