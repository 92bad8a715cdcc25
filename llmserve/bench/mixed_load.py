"""Mixed load against the load balancer for the HA tests and the chaos soak (bench/chaos.py): plain
clients (no retries of their own, so what they see is what HAProxy gives) and failover clients
(llmserve/client/failover.py)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

from ..client.failover import FailoverClient, GenerationError, Stats

logger = logging.getLogger(__name__)
PROMPT = "Tell me a story about a lighthouse keeper."


@dataclass
class Counts:
    ok: int = 0
    failed: int = 0
    cut: int = 0
    resumed: int = 0
    retried: int = 0
    errors: Counter = field(default_factory=Counter)

    def as_dict(self):
        return {
            "ok": self.ok,
            "failed": self.failed,
            "cut": self.cut,
            "resumed": self.resumed,
            "retried": self.retried,
            "errors": dict(self.errors.most_common(3)),
        }


def plain_generate(http: str, max_tokens: int, c: Counts) -> None:
    try:
        r = requests.post(
            f"http://{http}/v2/models/ensemble/generate",
            timeout=60,
            json={"text_input": PROMPT, "max_tokens": max_tokens},
        )
        if r.status_code == 200 and "text_output" in r.json():
            c.ok += 1
        else:
            c.failed += 1
            c.errors[f"{r.status_code} {r.text[:80]}"] += 1
    except requests.RequestException as e:
        c.failed += 1
        c.errors[type(e).__name__] += 1


def plain_stream(http: str, max_tokens: int, c: Counts) -> None:
    """A stream is cut when it broke after its first token, failed when it never started."""
    tokens = 0
    try:
        with requests.post(
            f"http://{http}/v2/models/ensemble/generate_stream",
            stream=True,
            timeout=60,
            json={"text_input": PROMPT, "max_tokens": max_tokens, "stream": True},
        ) as r:
            if r.status_code != 200:
                c.failed += 1
                c.errors[f"{r.status_code} {r.text[:80]}"] += 1
                return
            for line in r.iter_lines(chunk_size=None):
                if line.startswith(b"data:"):
                    event = json.loads(line[5:])
                    if "error" in event:
                        raise ConnectionError(event["error"])
                    # One event can carry several tokens (the engine coalesces when sends queue up).
                    lp = event.get("output_log_probs")
                    tokens += len(lp) if isinstance(lp, list) else 1
        if tokens == max_tokens:
            c.ok += 1
        else:
            c.cut += 1
            c.errors[f"short stream {tokens}/{max_tokens}"] += 1
    except (requests.RequestException, ConnectionError, ValueError) as e:
        if tokens:
            c.cut += 1
        else:
            c.failed += 1
        c.errors[type(e).__name__] += 1


def failover_stream(client: FailoverClient, max_tokens: int, c: Counts) -> None:
    g = client.stream(PROMPT, max_tokens, apply_chat_template=False)
    try:
        text = "".join(g)
        if g.stats.tokens == max_tokens and text:
            c.ok += 1
        else:
            c.failed += 1
            c.errors[f"tokens {g.stats.tokens}/{max_tokens}"] += 1
    except GenerationError as e:
        c.failed += 1
        c.errors[str(e)[:80]] += 1
    c.resumed += g.stats.resumes
    c.retried += g.stats.retries
    for e in g.stats.errors:
        c.errors["recovered: " + e.split(": ", 1)[-1][:60]] += 1


def failover_generate(client: FailoverClient, max_tokens: int, c: Counts) -> None:
    st = Stats()
    try:
        client.generate(PROMPT, max_tokens, stats=st, apply_chat_template=False)
        c.ok += 1
    except GenerationError as e:
        c.failed += 1
        c.errors[str(e)[:80]] += 1
    c.retried += st.retries
    for e in st.errors:
        c.errors["recovered: " + e.split(": ", 1)[-1][:60]] += 1


class MixedLoad:
    """8 concurrent clients until the `with` block ends: 3 plain non-streaming, 2 plain streams,
    2 failover streams (HTTP and gRPC), 1 failover non-streaming (gRPC)."""

    def __init__(self, http: str, grpc: str, *, stream_tokens: int = 24, unary_tokens: int = 8):
        self.stop_event = threading.Event()
        fo_http = FailoverClient([http], protocol="http", backoff_s=0.2, idle_timeout_s=20)
        fo_grpc = FailoverClient([grpc], protocol="grpc", backoff_s=0.2, idle_timeout_s=20)
        self.jobs = [  # (kind, job(counts)); one Counts per thread, summed in report()
            *[("plain", lambda c: plain_generate(http, unary_tokens, c))] * 3,
            *[("plain_stream", lambda c: plain_stream(http, stream_tokens, c))] * 2,
            ("failover_stream", lambda c: failover_stream(fo_http, stream_tokens, c)),
            ("failover_stream", lambda c: failover_stream(fo_grpc, stream_tokens, c)),
            ("failover_unary", lambda c: failover_generate(fo_grpc, unary_tokens, c)),
        ]
        self.per_thread = [Counts() for _ in self.jobs]
        self.threads = [
            threading.Thread(target=self._loop, args=(job, c), daemon=True)
            for (_, job), c in zip(self.jobs, self.per_thread)
        ]

    def _loop(self, job, counts):
        while not self.stop_event.is_set():
            job(counts)

    def __enter__(self):
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.elapsed = time.monotonic() - self.t0
        for t in self.threads:
            t.join(60)
        self.hung = sum(t.is_alive() for t in self.threads)
        self.drain_s = time.monotonic() - self.t0 - self.elapsed

    def totals(self) -> dict[str, Counts]:
        out: dict[str, Counts] = {}
        for (kind, _), c in zip(self.jobs, self.per_thread):
            t = out.setdefault(kind, Counts())
            t.ok, t.failed, t.cut = t.ok + c.ok, t.failed + c.failed, t.cut + c.cut
            t.resumed, t.retried = t.resumed + c.resumed, t.retried + c.retried
            t.errors.update(c.errors)
        return out

    def report(self, title: str) -> dict[str, Counts]:
        out = self.totals()
        logger.info(
            "[%s] %.1f s of mixed load, %d concurrent clients (last requests finished %.1f s later; "
            "clients still hung: %d):\n%s",
            title,
            self.elapsed,
            len(self.jobs),
            self.drain_s,
            self.hung,
            "\n".join(f"  {k:16s} {v.as_dict()}" for k, v in out.items()),
        )
        return out
