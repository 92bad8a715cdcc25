"""Spec section for several Triton servers behind HAProxy (`ha:` in a spec).

Everything HAProxy and the cluster launcher need comes from here (llmserve/deploy/haproxy.py renders
haproxy.cfg from it; llmserve/deploy/cluster.py starts the servers on the ports it names). Defaults suit
the local cluster (`scripts/serve.sh --replicas N`): HAProxy on the standard Triton ports, the
replicas on ports above them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Strict


class HealthCheck(Strict):
    """Active checks: GET /v2/health/ready on each server's HTTP port, 200 = ready."""

    path: str = "/v2/health/ready"
    interval_ms: int = Field(default=500, ge=50)
    """Time between checks of a server that is up (HAProxy `inter`)."""
    fall: int = Field(default=2, ge=1)
    """Consecutive failed checks before a server is marked down (detection ~ fall x interval)."""
    rise: int = Field(default=2, ge=1)
    """Consecutive good checks before a server that was down gets traffic again."""
    timeout_ms: int = Field(default=1000, ge=50)
    """A check that has not answered after this long fails (HAProxy `timeout check`)."""
    fastinter_ms: int = Field(default=100, ge=10)
    """Check interval right after real traffic saw errors (see on_error)."""
    observe_errors: int = Field(default=10, ge=1)
    """Passive check (`observe layer7`): after this many consecutive 5xx in real traffic, act (on_error)."""
    on_error: Literal["fastinter", "fail-check", "sudden-death", "mark-down"] = "fastinter"
    """fastinter (default): errors in real traffic trigger an immediate round of active checks, so a
    sick server is caught within ~fall x fastinter_ms. Not fail-check: Triton answers malformed
    client JSON with 500, so a client sending bad JSON would otherwise eject healthy servers."""


class HighAvailability(Strict):
    replicas: int = Field(default=3, ge=1)
    """Triton servers behind the load balancer (scripts/serve.sh --replicas overrides it)."""
    host: str = "127.0.0.1"
    """Address of the replicas for the local cluster (compose and Kubernetes use their own names)."""
    base_http_port: int = Field(default=18000, ge=1, le=65000)
    base_grpc_port: int = Field(default=18100, ge=1, le=65000)
    base_metrics_port: int = Field(default=18200, ge=1, le=65000)
    """Replica i (0-based) listens on base_*_port + i."""
    bind: str = "0.0.0.0"
    http_port: int = 8000
    """HAProxy's HTTP frontend (clients use it as they would use one Triton server)."""
    grpc_port: int = 8001
    """HAProxy's gRPC frontend: HTTP/2 end to end (h2c) to the servers' gRPC ports."""
    stats_port: int = 8404
    """Stats page (/) and Prometheus metrics (/metrics) of HAProxy itself."""
    stats_socket: str = "build/haproxy/haproxy.sock"
    """Runtime API (admin level) used by `llmserve.deploy.cluster rolling-restart`; relative to the project root."""
    check: HealthCheck = HealthCheck()
    balance: str = "leastconn"
    server_maxconn: int = Field(default=32, ge=1)
    """Requests in flight per server; more wait in HAProxy's queue (fairer than queueing in Triton)."""
    server_maxqueue: int = Field(default=64, ge=0)
    """Requests waiting per server; beyond this they go to another server or get 503 (bounded queue)."""
    queue_timeout_s: float = Field(default=30, gt=0)
    """A request that waited this long in HAProxy's queue gets 503."""
    connect_timeout_ms: int = Field(default=1000, ge=10)
    retries: int = Field(default=3, ge=0)
    """L7 retries of a request that has not started (connection refused, empty response, 502/503/504),
    each on another server (redispatch)."""
    stream_timeout_s: float | None = Field(default=None, gt=0)
    """Idle timeout for client and server sides; default: serving.request_timeout_s + 30 s, so the
    longest generation the spec allows is never cut by HAProxy."""
    slowstart_s: float = Field(default=0, ge=0)
    """Ramp traffic to a server that came back over this long (0: off)."""
    drain_timeout_s: float = Field(default=0, ge=0)
    """rolling-restart: how long to wait for a drained server's sessions to finish; 0 means
    serving.exit_timeout_s."""

    @model_validator(mode="after")
    def _ports(self):
        lb = {self.http_port, self.grpc_port, self.stats_port}
        if len(lb) != 3:
            raise ValueError("ha.http_port, ha.grpc_port and ha.stats_port must differ")
        ranges = [(b, b + self.replicas) for b in (self.base_http_port, self.base_grpc_port, self.base_metrics_port)]
        for i, (a0, a1) in enumerate(ranges):
            for b0, b1 in ranges[i + 1 :]:
                if a0 < b1 and b0 < a1:
                    raise ValueError("ha.base_*_port ranges overlap for this many replicas")
            if any(a0 <= p < a1 for p in lb):
                raise ValueError("ha.base_*_port ranges include a load-balancer port")
        return self

    def replica_ports(self, i: int) -> tuple[int, int, int]:
        return self.base_http_port + i, self.base_grpc_port + i, self.base_metrics_port + i
