"""The engine's own Prometheus metrics, published through Triton's custom-metrics API on :8002
beside Triton's nv_inference_* series. `pb` is triton_python_backend_utils (passed in)."""

from __future__ import annotations

import threading

from ..engine.engine import Engine

GAUGES = {
    "llmserve_requests_running": ("Sequences generating in the engine now", lambda s: s.running),
    "llmserve_requests_waiting": ("Requests waiting for a free engine slot", lambda s: s.waiting),
    "llmserve_kv_cache_used_tokens": ("KV cache tokens held by running sequences", lambda s: s.kv_cache_used_tokens),
    "llmserve_kv_cache_capacity_tokens": ("KV cache capacity in tokens", lambda s: s.kv_cache_capacity_tokens),
    "llmserve_kv_cache_utilization": (
        "Fraction of the KV cache in use",
        lambda s: s.kv_cache_used_tokens / max(1, s.kv_cache_capacity_tokens),
    ),
    "llmserve_batch_size_last": ("Sequences in the latest decode step", lambda s: s.last_batch_size),
    "llmserve_batch_size_max": ("Largest decode batch since start", lambda s: s.max_batch_size_seen),
}
COUNTERS = {
    "llmserve_generated_tokens_total": ("Tokens generated", lambda s: s.generated_tokens),
    "llmserve_prompt_tokens_total": ("Prompt tokens prefilled", lambda s: s.prompt_tokens),
    "llmserve_decode_steps_total": ("Decode steps run", lambda s: s.steps),
    "llmserve_batched_decode_steps_total": (
        "Decode steps that carried more than one sequence",
        lambda s: s.batched_steps,
    ),
    "llmserve_requests_finished_total": ("Requests finished", lambda s: s.finished),
    "llmserve_requests_cancelled_total": ("Requests cancelled by the client", lambda s: s.cancelled),
    "llmserve_requests_timed_out_total": ("Requests cancelled by serving.request_timeout_s", lambda s: s.timed_out),
    "llmserve_requests_rejected_total": ("Requests refused because the engine queue was full", lambda s: s.rejected),
    # Sums with their counts (mean = rate(sum) / rate(count)): where a first token waits inside this model.
    "llmserve_requests_admitted_total": ("Requests that reached an engine step", lambda s: s.admitted),
    "llmserve_request_queue_seconds_total": (
        "Seconds from arrival at this model to the first engine step, summed over admitted requests",
        lambda s: s.queue_seconds,
    ),
    "llmserve_first_tokens_total": ("Requests that got their first token", lambda s: s.first_tokens),
    "llmserve_time_to_first_token_seconds_total": (
        "Seconds from arrival at this model to the first token sampled, summed over requests",
        lambda s: s.first_token_seconds,
    ),
}


class EngineMetrics:
    def __init__(self, pb, engine: Engine, labels: dict[str, str], period_s: float = 0.5):
        self.engine, self.period_s = engine, period_s
        fam = pb.MetricFamily
        # Families must outlive their metrics (Triton refuses updates otherwise): keep both.
        self.families = {n: fam(n, d, fam.GAUGE) for n, (d, _) in GAUGES.items()}
        self.families.update({n: fam(n, d, fam.COUNTER) for n, (d, _) in COUNTERS.items()})
        self.gauges = {n: (self.families[n].Metric(labels=labels), f) for n, (_, f) in GAUGES.items()}
        self.counters = {n: (self.families[n].Metric(labels=labels), f) for n, (_, f) in COUNTERS.items()}
        self.last = {n: 0 for n in COUNTERS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmserve-metrics", daemon=True)
        self._thread.start()

    def publish(self) -> None:
        stats = self.engine.stats
        for metric, f in self.gauges.values():
            metric.set(f(stats))
        for name, (metric, f) in self.counters.items():
            value = f(stats)
            if value > self.last[name]:
                metric.increment(value - self.last[name])
                self.last[name] = value

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.publish()

    def close(self) -> None:
        """Stop publishing and free the metrics now, in finalize(): what a model still holds when the stub
        exits is freed after the stub's shared memory is gone, and python_backend's MetricFamily destructor
        writes to it (a segfault in Metric::Clear in tritonserver's log at every unload, Triton 2.51)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.gauges.clear()  # the metrics before their families
        self.counters.clear()
        self.families.clear()
