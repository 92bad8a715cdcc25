"""The frontend's Prometheus metrics (`GET /metrics`): vLLM's names and buckets under our prefix
`llmserve_api_`, with a `model` label (the served model name). They are measured where the OpenAI
client is, so they include the ensemble, the network and any retry or resume.

| ours | vLLM's | what |
|---|---|---|
| llmserve_api_time_to_first_token_seconds | vllm:time_to_first_token_seconds | request received -> first generated token |
| llmserve_api_inter_token_latency_seconds | vllm:inter_token_latency_seconds | between tokens (a response of n tokens after a gap d: n observations of d/n) |
| llmserve_api_e2e_request_latency_seconds | vllm:e2e_request_latency_seconds | request received -> last token |
| llmserve_api_request_queue_time_seconds | vllm:request_queue_time_seconds | request received -> sent to a Triton server (validation, templating, waiting for a server); time queued inside the engine is in the engine's llmserve_requests_waiting |
| llmserve_api_request_prompt_tokens / _generation_tokens | vllm:request_prompt_tokens / _generation_tokens | per request |
| llmserve_api_prompt_tokens_total / generation_tokens_total | vllm:prompt_tokens_total / generation_tokens_total | counters |
| llmserve_api_request_success_total{finished_reason} | vllm:request_success_total | stop, length, abort (client hung up) |
| llmserve_api_num_requests_running | vllm:num_requests_running | requests in this frontend now |

Ours only: llmserve_api_request_errors_total{status} (answered with an error), llmserve_api_retries_total
(sent again before any token), llmserve_api_stream_resumes_total (continued on another server).

The `_api_` part keeps them apart from the engine's own `llmserve_*` series on Triton's metrics port
(e.g. the engine's llmserve_prompt_tokens_total)."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

PREFIX = "llmserve_api_"
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
# vLLM's queue-time histogram shares REQUEST_BUCKETS; the frontend's own wait is usually far below
# 0.3 s, so finer buckets are prepended (a superset: vLLM's bucket bounds stay comparable).
QUEUE_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1) + REQUEST_BUCKETS


def one_two_five(limit: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's build_1_2_5_buckets)."""
    out, exp = [], 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > limit:
                return out
            out.append(v)
        exp += 1


class Metrics:
    def __init__(self, model: str, max_model_len: int):
        self.registry = r = CollectorRegistry()
        lab = ["model"]
        p = PREFIX
        self.ttft = Histogram(
            p + "time_to_first_token_seconds", "Time to first token in seconds.", lab, buckets=TTFT_BUCKETS, registry=r
        ).labels(model)
        self.itl = Histogram(
            p + "inter_token_latency_seconds", "Inter-token latency in seconds.", lab, buckets=ITL_BUCKETS, registry=r
        ).labels(model)
        self.e2e = Histogram(
            p + "e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            lab,
            buckets=REQUEST_BUCKETS,
            registry=r,
        ).labels(model)
        self.queue = Histogram(
            p + "request_queue_time_seconds",
            "Time from receipt to dispatch to a Triton server in seconds.",
            lab,
            buckets=QUEUE_BUCKETS,
            registry=r,
        ).labels(model)
        tokens = one_two_five(max_model_len)
        self.req_prompt = Histogram(
            p + "request_prompt_tokens", "Prompt tokens per request.", lab, buckets=tokens, registry=r
        ).labels(model)
        self.req_generation = Histogram(
            p + "request_generation_tokens", "Generated tokens per request.", lab, buckets=tokens, registry=r
        ).labels(model)
        self.prompt_tokens = Counter(
            p + "prompt_tokens_total", "Prompt tokens of finished requests.", lab, registry=r
        ).labels(model)
        self.generation_tokens = Counter(p + "generation_tokens_total", "Generated tokens.", lab, registry=r).labels(
            model
        )
        self._success = Counter(
            p + "request_success_total", "Finished requests by finish reason.", lab + ["finished_reason"], registry=r
        )
        self.success = {k: self._success.labels(model, k) for k in ("stop", "length", "abort")}
        self._errors = Counter(
            p + "request_errors_total", "Requests answered with an error, by HTTP status.", lab + ["status"], registry=r
        )
        self.model = model
        # livesum: with several workers (workers.py), the sum over the living ones.
        self.running = Gauge(
            p + "num_requests_running", "Requests in this frontend now.", lab, registry=r, multiprocess_mode="livesum"
        ).labels(model)
        self.retries = Counter(
            p + "retries_total", "Requests sent again to another server before any token.", lab, registry=r
        ).labels(model)
        self.resumes = Counter(
            p + "stream_resumes_total", "Streams continued on another server after tokens.", lab, registry=r
        ).labels(model)

    def error(self, status: int) -> None:
        self._errors.labels(self.model, str(status)).inc()

    def render(self) -> bytes:
        """This process's series, or with several workers (PROMETHEUS_MULTIPROC_DIR set, workers.py)
        every worker's, added up."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
