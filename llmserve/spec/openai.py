"""Spec section for the OpenAI-compatible frontend (`openai:` in a spec): llmserve/openai_api/.

`scripts/serve.sh` starts one frontend next to tritonserver on `port`; `serve.sh --replicas N`
starts N frontends on `base_port + i`, behind HAProxy's own frontend on `port` (health-checked on
/health like the Triton servers on /v2/health/ready). Each frontend runs `workers` processes on its
port (llmserve/openai_api/workers.py)."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from .base import Strict

AUTO, NONE = "auto", "none"
"""The frontend's --token-model besides a model name: the spec decides (openai.token_level); the ensemble
for every request."""


class OpenAIFrontend(Strict):
    enabled: bool = True
    """Start the frontend with scripts/serve.sh (and one per replica with --replicas)."""
    port: int = Field(default=9000, ge=1, le=65535)
    """Where OpenAI clients connect: the frontend itself, or HAProxy in front of N of them."""
    bind: str = "0.0.0.0"
    base_port: int = Field(default=19000, ge=1, le=65000)
    """--replicas N: frontend i (0-based) listens on 127.0.0.1:base_port + i behind HAProxy."""
    served_model_name: str | None = None
    """The `model` clients name (and /v1/models lists); default: the spec's `name`."""
    default_max_tokens: int | None = Field(default=None, ge=1)
    """A request without max_tokens / max_completion_tokens gets this many; default engine.max_output_len."""
    api_keys: list[str] = Field(default_factory=list)
    """Accepted `Authorization: Bearer` keys. Prefer api_keys_env or api_keys_file: a spec is often
    committed. No key anywhere: no check."""
    api_keys_env: str = "LLMSERVE_API_KEYS"
    """Environment variable with comma-separated keys (read when set)."""
    api_keys_file: str | None = None
    """File with one key per line (# comments); relative to the project root."""
    idle_timeout_s: float | None = Field(default=None, gt=0)
    """A stream with no response from Triton for this long is broken (resumed elsewhere); default
    serving.request_timeout_s + 30 s."""
    max_attempts: int = Field(default=6, ge=1)
    """Sends of one request (first try + retries + resumes) before it fails with 503."""
    health_interval_ms: int = Field(default=500, ge=50)
    """How often the frontend checks each Triton server's readiness."""
    token_level: bool = True
    """Stream from the token-level model itself (the prompt's tokens in; detokenizing and stop strings
    in the frontend's workers), not through the ensemble's Python steps: every streamed token then skips
    postprocessing, and on the tensorrtllm layout the relay too. Guided decoding and top log-probs go
    through the ensemble still. Needs serving.streaming (a decoupled token-level model)."""
    token_transport: Literal["grpc", "http"] = "http"
    """How the token-level route reads the token-level model: Triton's HTTP generate_stream (the frontend
    then needs each server's HTTP endpoint too, --triton-http; serve.sh and the cluster pass it), or gRPC
    ModelStreamInfer. HTTP costs the frontend about 0.55-0.6 of gRPC's CPU per streamed token, and gave
    1.17x (torch layout) and 1.32-1.37x (tensorrtllm layout) the OpenAI API's tok/s on a 16-core GPU host
    (docs/perf-gpu.md)."""
    workers: int | None = Field(default=None, ge=1, le=64)
    """Worker processes per frontend, sharing its port (uvicorn's supervisor restarts one that dies;
    /metrics adds up all of them). One process handles about one core's worth of streams
    (docs/perf-gpu.md). Default: worker_count()."""

    def worker_count(self, frontends: int = 1, cores: int | None = None) -> int:
        """`workers`, or the default sized to the machine: a quarter of the cores this process may run
        on (tritonserver's stubs need the rest), at most 8, shared by the `frontends` of one host
        (`--replicas`), at least 1. So 1 on a 2-core machine, 4 on 16 cores."""
        if self.workers:
            return self.workers
        cores = cores or len(os.sched_getaffinity(0))
        return max(1, min(8, cores // 4) // max(1, frontends))

    def idle_timeout(self, request_timeout_s: float) -> float:
        """idle_timeout_s, or its default: the engine's request timeout (serving.request_timeout_s) + 30 s,
        so that a stream the engine is still allowed to run is never taken for broken."""
        return self.idle_timeout_s or request_timeout_s + 30

    @property
    def health_interval_s(self) -> float:
        return self.health_interval_ms / 1000
