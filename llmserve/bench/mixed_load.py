"""Mixed load against the load balancer for the HA tests and the chaos soak (bench/chaos.py): plain
clients (no retries of their own, so what they see is what HAProxy gives), failover clients
(llmserve/client/failover.py), OpenAI streams through the cluster's OpenAI frontends (when it has
them), and clients that hang up mid-stream (HTTP generate_stream closed, gRPC stream cancelled, OpenAI
SSE closed).

Per client kind: ok, failed (an error a client could not have retried), retryable (an error before
the first token that a client may retry elsewhere: a refused or reset connection, HTTP 429/5xx, gRPC
UNAVAILABLE ...; the rules are client/retry.py's), cut (a stream broken after its first token),
resumed and retried (failover clients). A hang-up client's planned hang-up is its `ok`."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import requests

from ..client import wire
from ..client.failover import FailoverClient, GenerationError, Stats
from ..client.retry import grpc_error, http_error, in_band_error

logger = logging.getLogger(__name__)
PROMPT = "Tell me a story about a lighthouse keeper."


@dataclass
class Counts:
    ok: int = 0
    failed: int = 0
    retryable: int = 0
    cut: int = 0
    resumed: int = 0
    retried: int = 0
    errors: Counter = field(default_factory=Counter)

    def fail(self, why: str, retryable: bool) -> None:
        """A request that failed before its first token."""
        if retryable:
            self.retryable += 1
        else:
            self.failed += 1
        self.errors[("retryable: " if retryable else "") + why[:80]] += 1

    def hung_up(self, got: int, after: int, unit: str) -> None:
        """A hang-up client's result: ok when it got `after` {unit} and hung up, cut when its stream
        ended before that."""
        if got >= after:
            self.ok += 1
        else:
            self.cut += 1
            self.errors[f"ended after {got} {unit}, before the hang-up"] += 1

    def as_dict(self):
        return {
            "ok": self.ok,
            "failed": self.failed,
            "retryable": self.retryable,
            "cut": self.cut,
            "resumed": self.resumed,
            "retried": self.retried,
            "errors": dict(self.errors.most_common(3)),
        }


def _retryable(e: requests.RequestException) -> bool:
    """A connection refused or reset before an answer: safe to send elsewhere (a read timeout is not)."""
    return isinstance(e, requests.ConnectionError) and not isinstance(e, requests.ReadTimeout)


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
            c.fail(
                f"{r.status_code} {r.text[:80]}", r.status_code != 200 and http_error(r.status_code, r.text).retryable
            )
    except requests.RequestException as e:
        c.fail(type(e).__name__, isinstance(e, requests.ConnectionError))


def _event_tokens(event: dict) -> int:
    # One event can carry several tokens (the engine coalesces when sends queue up).
    lp = event.get("output_log_probs")
    return len(lp) if isinstance(lp, list) else 1


def _sse_stream(http: str, max_tokens: int, c: Counts, count, stop_at: int | None = None) -> int | None:
    """One generate_stream request: count(event) for each SSE event, summed; with stop_at, hang up once
    the sum reaches it. Returns the sum, or None when the request failed (before its first event) or
    broke (after it): those are counted in `c` here, the caller counts what it returns."""
    n = 0
    try:
        with requests.post(
            f"http://{http}/v2/models/ensemble/generate_stream",
            stream=True,
            timeout=60,
            json={"text_input": PROMPT, "max_tokens": max_tokens, "stream": True},
        ) as r:
            if r.status_code != 200:
                c.fail(f"{r.status_code} {r.text[:80]}", http_error(r.status_code, r.text).retryable)
                return None
            for line in r.iter_lines(chunk_size=None):
                if line.startswith(b"data:"):
                    event = json.loads(line[5:])
                    if "error" in event:
                        raise ConnectionError(event["error"])
                    n += count(event)
                    if stop_at is not None and n >= stop_at:
                        break  # leaving the `with` closes the connection mid-stream
        return n
    except (requests.RequestException, ConnectionError, ValueError) as e:
        if n:
            c.cut += 1
            c.errors[type(e).__name__] += 1
        else:
            in_band = type(e) is ConnectionError  # an error event before the first token
            c.fail(f"{type(e).__name__}: {e}", in_band_error(str(e)).retryable if in_band else _retryable(e))
        return None


def plain_stream(http: str, max_tokens: int, c: Counts) -> None:
    """A stream is cut when it broke after its first token, failed when it never started."""
    tokens = _sse_stream(http, max_tokens, c, _event_tokens)
    if tokens is None:
        return
    if tokens == max_tokens:
        c.ok += 1
    else:
        c.cut += 1
        c.errors[f"short stream {tokens}/{max_tokens}"] += 1


def openai_stream(client, model: str, max_tokens: int, c: Counts, hang_up_after: int | None = None) -> None:
    """An OpenAI completions stream through HAProxy's `openai` frontend (the `openai` SDK, no retries
    of its own). With hang_up_after: close the stream after that many chunks (the SDK closes the
    HTTP response: an SSE hang-up)."""
    import openai

    chunks, usage = 0, None
    try:
        stream = client.completions.create(
            model=model,
            prompt=PROMPT,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        try:
            for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                if chunk.choices and chunk.choices[0].text:
                    chunks += 1
                    if hang_up_after is not None and chunks >= hang_up_after:
                        break
        finally:
            stream.close()
        if hang_up_after is not None:
            c.hung_up(chunks, hang_up_after, "chunks")
        elif usage is not None and usage.completion_tokens == max_tokens:
            c.ok += 1
        else:
            c.cut += 1
            c.errors[f"short stream: usage {usage and usage.completion_tokens}/{max_tokens}"] += 1
    except openai.APIStatusError as e:
        if chunks:
            c.cut += 1
            c.errors[f"{e.status_code} after {chunks} chunks"] += 1
        else:
            c.fail(f"{e.status_code} {str(e)[:60]}", http_error(e.status_code, str(e)).retryable)
    except openai.APIError as e:  # connection errors, an error event in the stream
        if chunks:
            c.cut += 1
            c.errors[f"{type(e).__name__} after {chunks} chunks"] += 1
        else:
            c.fail(f"{type(e).__name__}: {str(e)[:60]}", isinstance(e, openai.APIConnectionError))


def hangup_http(http: str, max_tokens: int, after: int, c: Counts) -> None:
    """A generate_stream client that closes the connection after `after` events."""
    events = _sse_stream(http, max_tokens, c, lambda _event: 1, stop_at=after)
    if events is None:
        return
    c.hung_up(events, after, "events")


def hangup_grpc(grpc: str, max_tokens: int, after: int, c: Counts) -> None:
    """A gRPC ModelStreamInfer client (tritonclient, no request id) that cancels its stream after
    `after` responses: stop_stream(cancel_requests=True)."""
    import queue

    import tritonclient.grpc as g
    from tritonclient.utils import InferenceServerException

    q: queue.Queue = queue.Queue()
    client = g.InferenceServerClient(grpc)
    got = 0
    try:
        client.start_stream(callback=lambda result, error: q.put((result, error)), stream_timeout=60)
        client.async_stream_infer(
            "ensemble",
            wire.infer_inputs({"text_input": PROMPT, "max_tokens": max_tokens, "stream": True}, g),
            enable_empty_final_response=True,
        )
        while got < after:
            result, error = q.get(timeout=60)
            if error is not None:
                status = error.status() if hasattr(error, "status") else None
                err = grpc_error(str(status), str(error)) if status else in_band_error(str(error))
                if got:
                    c.cut += 1
                    c.errors[str(err)[:80]] += 1
                else:
                    c.fail(str(err), err.retryable)
                return
            if wire.result_piece(result) is not None:
                got += 1
            if wire.is_final(result.get_response()):
                break
        c.hung_up(got, after, "responses")
    except queue.Empty:
        if got:
            c.cut += 1
            c.errors["no response for 60 s"] += 1
        else:
            c.fail("no response for 60 s", False)
    except InferenceServerException as e:
        c.fail(str(e), grpc_error(str(e.status()), str(e)).retryable)
    finally:
        try:
            client.stop_stream(cancel_requests=True)
        except Exception:  # noqa: BLE001 - the channel may be dead already
            pass
        client.close()


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
    """Concurrent clients until the `with` block ends: 3 plain non-streaming, 2 plain streams, 2
    failover streams (HTTP and gRPC), 1 failover non-streaming (gRPC); with `openai` (the base URL of
    the cluster's OpenAI frontend, e.g. http://localhost:9000/v1) 2 OpenAI streams; with `hang_ups`
    one client of each hang-up kind (HTTP, gRPC, OpenAI when there is `openai`)."""

    def __init__(
        self,
        http: str,
        grpc: str,
        *,
        stream_tokens: int = 24,
        unary_tokens: int = 8,
        openai: str | None = None,
        openai_model: str | None = None,
        hang_ups: bool = False,
        hang_up_after: int = 4,
    ):
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
        if openai:
            import openai as sdk

            for name in ("httpx", "httpx2", "openai"):  # a line per request at INFO would drown the log
                logging.getLogger(name).setLevel(logging.WARNING)
            oa = sdk.OpenAI(base_url=openai, api_key="chaos", max_retries=0, timeout=120)
            self.jobs += [("openai_stream", lambda c: openai_stream(oa, openai_model, stream_tokens, c))] * 2
        if hang_ups:
            long = 4 * stream_tokens  # hung up well before its end
            self.jobs += [
                ("hangup_http", lambda c: hangup_http(http, long, hang_up_after, c)),
                ("hangup_grpc", lambda c: hangup_grpc(grpc, long, hang_up_after, c)),
            ]
            if openai:
                self.jobs.append(
                    ("hangup_openai", lambda c: openai_stream(oa, openai_model, long, c, hang_up_after=hang_up_after))
                )
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
            t.retryable += c.retryable
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
