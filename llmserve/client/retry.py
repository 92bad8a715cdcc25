"""The failover policy of both ensemble clients (failover.py, sync; aio.py, async): which failures
are retried, which server the next attempt goes to, how long to back off, when to give up, and how
a stream that broke after some tokens is resumed. The clients only move bytes; every decision about
one request across attempts is `Attempts`', so the two cannot drift apart.

- **Retried** (on another server, with back-off): failures another server may not have, i.e. the
  connection, the gRPC statuses of GRPC_RETRY, HTTP's RETRY_HTTP, and in-band errors that are neither
  the request's fault nor its spent time (`errors.classify`). Never retried: a request error (it
  fails the same way everywhere) or a request timeout (retrying would double the wait).
- **Resumed** after tokens: the same request with the prompt as the model saw it + the text so far
  and the remaining budget (`resume_request`), so the caller sees one uninterrupted stream.
- **Budget**: `max_attempts` sends (first try + retries + resumes); then `GaveUp`, BUSY when the
  last failure was a full queue (the caller may come back soon), else UNAVAILABLE.
- **Pick**: the least busy healthy server not yet tried for this request; else any not tried; else
  any. Ties are broken by a rotation (round robin, random start), so load spreads."""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import RETRY_ELSEWHERE, ErrorKind, classify
from ..spec.openai import OpenAIFrontend

log = logging.getLogger(__name__)

SPEC = OpenAIFrontend()
"""The spec's defaults for the knobs it has (max_attempts, idle timeout, health interval)."""

RETRY_HTTP = {429, 500, 502, 503, 504}
GRPC_RETRY = {
    "StatusCode.UNAVAILABLE",
    "StatusCode.RESOURCE_EXHAUSTED",
    "StatusCode.INTERNAL",
    "StatusCode.CANCELLED",
    "StatusCode.UNKNOWN",
    "StatusCode.DEADLINE_EXCEEDED",
    "StatusCode.ABORTED",
    # A server that is (re)loading its models answers these for a while; another one may not.
    "StatusCode.NOT_FOUND",
    "StatusCode.UNIMPLEMENTED",
}
NOT_RETRIED = (ErrorKind.INVALID_ARGUMENT, ErrorKind.TIMEOUT)


class GenerationError(Exception):
    """A failed attempt, or a failed request. `kind`: what it means; `retryable`: another server may
    not fail the same way; `status`: the transport's own code (HTTP status, gRPC status name), if any."""

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind = ErrorKind.INTERNAL,
        status: int | str | None = None,
        retryable: bool = False,
    ):
        super().__init__(message)
        self.kind, self.status, self.retryable = kind, status, retryable


class StreamBroken(GenerationError):
    """The stream stopped after it had started (server gone, connection cut): resume it elsewhere."""

    def __init__(self, message: str):
        super().__init__(message, kind=ErrorKind.UNAVAILABLE, retryable=True)


class GaveUp(GenerationError):
    """Every attempt the budget allowed failed. `last`: the last failure ("<server>: <why>")."""

    def __init__(self, attempts: int, last: str, last_error: GenerationError):
        super().__init__(
            f"gave up after {attempts} failed attempts: {last}",
            status=last_error.status,
            kind=ErrorKind.BUSY if last_error.kind is ErrorKind.BUSY else ErrorKind.UNAVAILABLE,
            retryable=True,
        )
        self.attempts, self.last = attempts, last


def in_band_error(message: str) -> GenerationError:
    """An error response inside a stream: only its message says what it is (the ensemble keeps no code)."""
    kind = classify(message)
    return GenerationError(message, kind=kind, retryable=kind not in NOT_RETRIED)


def grpc_error(status: str, message: str) -> GenerationError:
    """A gRPC call that failed with `status` ("StatusCode.X")."""
    if status == "StatusCode.INVALID_ARGUMENT":
        return GenerationError(message, kind=ErrorKind.INVALID_ARGUMENT, status=status)
    if status in GRPC_RETRY:
        kind = ErrorKind.BUSY if status == "StatusCode.RESOURCE_EXHAUSTED" else ErrorKind.UNAVAILABLE
        return GenerationError(message, kind=kind, status=status, retryable=True)
    return GenerationError(message, status=status)


def http_error(status: int, message: str) -> GenerationError:
    """An HTTP answer other than 200. Triton's generate endpoint answers every model error with 400,
    so the message says what it is (busy or unavailable: retried); RETRY_HTTP statuses (HAProxy's,
    the unary twins') are retried too unless the message says request error or timeout."""
    kind = classify(message)
    retryable = kind in RETRY_ELSEWHERE or (status in RETRY_HTTP and kind not in NOT_RETRIED)
    return GenerationError(message, kind=kind, status=status, retryable=retryable)


def resume_request(request: dict, prompt_seen: str, text: str, tokens: int) -> dict:
    """The request that continues a stream elsewhere after `tokens` tokens produced `text`: the
    prompt as the model saw it + the text so far, no chat template (it is in prompt_seen), the
    remaining budget (min_tokens reduced alike)."""
    body = {
        **request,
        "text_input": prompt_seen + text,
        "apply_chat_template": False,
        "max_tokens": request["max_tokens"] - tokens,
    }
    if "min_tokens" in request:
        body["min_tokens"] = max(0, request["min_tokens"] - tokens)
    return body


@dataclass
class Stats:
    """What happened to one request: for metrics, logs and tests."""

    attempts: int = 0
    """Requests sent (first try + retries + resumes)."""
    retries: int = 0
    """Re-sent before any token arrived."""
    resumes: int = 0
    """Streams continued on another server after tokens had arrived."""
    tokens: int = 0
    endpoints: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """"<server>: <why>" of each failure that was retried or resumed (or the last one, given up on);
    an error that is not retried is raised instead."""
    dispatched_at: float | None = None
    """Monotonic time the first attempt went out (set by the client that knows it)."""


@dataclass(eq=False)
class Server:
    url: str
    healthy: bool = True
    """Optimistic until a check says otherwise (only the async client checks)."""
    inflight: int = 0


S = TypeVar("S", bound=Server)


class Picker:
    """Which server the next attempt goes to (see the module's docstring). `start`: the rotation's
    first position (default random, so that many clients spread over the servers)."""

    def __init__(self, start: int | None = None):
        self._rotate = itertools.count(random.randrange(1 << 16) if start is None else start)

    def pick(self, servers: Sequence[S], avoid: Collection[str] = ()) -> S:
        if not servers:
            raise ValueError("no servers")
        start = next(self._rotate) % len(servers)
        ordered = list(servers[start:]) + list(servers[:start])
        for pool in (
            [s for s in ordered if s.healthy and s.url not in avoid],
            [s for s in ordered if s.url not in avoid],
        ):
            if pool:
                return min(pool, key=lambda s: s.inflight)  # the first of the least busy
        return min(ordered, key=lambda s: s.inflight)


@dataclass(frozen=True)
class Backoff:
    """max_attempts sends of one request; before the n-th retry or resume, a pause of
    backoff_s * 2^(n-1), at most max_backoff_s, jittered to 50-100% so clients do not retry in step."""

    backoff_s: float
    max_backoff_s: float
    max_attempts: int = SPEC.max_attempts

    def delay(self, failures: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1)) * (0.5 + random.random() / 2)


class Attempts:
    """One request's way across servers. The client's loop:

        while True:
            server = picker.pick(servers, attempts.tried); attempts.begin(server.url)
            try: send attempts.body(); for each piece: attempts.received(text, tokens); ...; return
            except GenerationError as e: delay = attempts.failed(server.url, e) -> None: done; else sleep(delay)

    `prompt_seen()` gives the prompt as the model saw it; called once, at the first resume."""

    def __init__(self, request: dict, backoff: Backoff, stats: Stats, servers: int, prompt_seen: Callable[[], str]):
        self.request, self.backoff, self.stats, self.servers = request, backoff, stats, servers
        self._prompt_seen, self._base = prompt_seen, None
        self.pieces: list[str] = []
        self.tried: set[str] = set()
        self.failures = 0

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def body(self) -> dict:
        """What the next attempt sends: the request, or after tokens its resumption."""
        if not self.stats.tokens:
            return self.request
        if self._base is None:
            self._base = self._prompt_seen()
        return resume_request(self.request, self._base, self.text, self.stats.tokens)

    def generated(self) -> int:
        """Tokens the engine has produced for this request so far (a resume continues after them)."""
        return self.stats.tokens

    def budget(self) -> int:
        return self.request["max_tokens"]

    def begin(self, url: str) -> None:
        self.stats.attempts += 1
        self.stats.endpoints.append(url)

    def received(self, text: str, tokens: int) -> None:
        self.stats.tokens += tokens
        if text:
            self.pieces.append(text)

    def failed(self, url: str, error: GenerationError) -> float | None:
        """After the attempt on `url` failed: None when there is nothing left to generate (the cut came
        after the last token), else the pause before the next attempt. Raises `error` when it is not
        retryable, GaveUp when the attempts are spent."""
        if not error.retryable:
            raise error
        why = f"{url}: {error}"
        self.stats.errors.append(why)
        self.tried.add(url)
        if len(self.tried) >= self.servers:
            self.tried.clear()  # every server failed once: any may be back
        if self.generated() and self.generated() >= self.budget():
            return None
        if self.generated():
            self.stats.resumes += 1
        else:
            self.stats.retries += 1
        self.failures += 1
        if self.failures >= self.backoff.max_attempts:
            log.debug("giving up after %d failed attempts; last: %s", self.failures, why)
            raise GaveUp(self.failures, why, error) from error
        log.debug(
            "attempt %d failed (%s); %s",
            self.stats.attempts,
            why,
            f"resuming after {self.generated()} tokens" if self.generated() else "retrying",
        )
        return self.backoff.delay(self.failures)


class TokenAttempts(Attempts):
    """Attempts of a token-level request (input_ids, request_output_len: the OpenAI frontend's path
    to the engine model itself). A resume continues from the tokens themselves, `generated` (every
    token the engine sent, also those held back from the caller), so it is exact whatever the text."""

    def __init__(self, request: dict, backoff: Backoff, stats: Stats, servers: int, generated: list[int]):
        super().__init__(request, backoff, stats, servers, lambda: "")
        self.tokens_so_far = generated  # the caller's list, appended to as tokens arrive

    def generated(self) -> int:
        return len(self.tokens_so_far)

    def budget(self) -> int:
        return self.request["request_output_len"]

    def body(self) -> dict:
        n = len(self.tokens_so_far)
        if not n:
            return self.request
        ids = list(self.request["input_ids"]) + self.tokens_so_far
        body = {**self.request, "input_ids": ids, "input_lengths": len(ids), "request_output_len": self.budget() - n}
        if "min_tokens" in self.request:
            body["min_tokens"] = max(0, self.request["min_tokens"] - n)
        return body
