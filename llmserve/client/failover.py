"""A failover client for the ensemble: several endpoints (or one load balancer), retries of what is
safe to retry, and streams that survive the loss of the server that was generating them.

    client = FailoverClient(["localhost:8000"], tokenizer_dir="build/checkpoints/smollm2-135m-instruct")
    text = client.generate("What is the capital of France?", 32)
    for piece in client.stream("Write a haiku about the sea.", 48):
        print(piece, end="", flush=True)

Retried (on the next endpoint, with backoff; the rules are retry.py's, shared with the frontend's
async client): connection refused/reset before an answer, HTTP 429, 500, 502, 503 and 504, gRPC
UNAVAILABLE / RESOURCE_EXHAUSTED / INTERNAL / CANCELLED / UNKNOWN / ..., an error whose message says
busy or unavailable, before any token. Never retried: a request error (HTTP 400 "invalid <field>",
gRPC INVALID_ARGUMENT), a request timeout, 501/505. Generation has no side effects, so re-sending is
safe; what is not retried would fail the same way everywhere.

Stream resume (what NVIDIA Dynamo calls request migration): when a stream breaks after some tokens
(server killed, connection cut, an error event under HTTP 200), the client sends the request again
to another endpoint with `text_input` = the prompt as the model saw it + the text received so far,
`apply_chat_template=false`, `max_tokens` = the remaining budget (and `min_tokens` reduced alike),
and keeps streaming. The caller sees one uninterrupted stream. "The prompt as the model saw it":
for a raw prompt (apply_chat_template false) that is the prompt; for a chat prompt the client
renders the checkpoint's chat template itself, so it needs `tokenizer_dir` (the same tokenizer the
server uses; tools/client.py takes it from --spec). Tokens are counted from the per-token
`output_log_probs` of each streamed response.

A greedy stream resumed this way equals an uninterrupted one exactly when the text received so far
re-tokenizes into the tokens that produced it, which is the normal case for text a real model
writes (tests/ha/test_failover_client.py proves it with SmolLM2). A model that emits
non-canonical token sequences (e.g. a random model writing "\\n" "\\n" where "\\n\\n" is one token)
continues from the canonical tokens instead: same text so far, possibly another continuation.
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Iterator

import requests

from ..errors import ErrorKind
from . import wire
from .retry import (
    SPEC,
    Attempts,
    Backoff,
    GaveUp,
    GenerationError,
    Picker,
    Server,
    Stats,
    StreamBroken,
    grpc_error,
    http_error,
    in_band_error,
)

__all__ = ["FailoverClient", "Generation", "GenerationError", "GaveUp", "Stats", "StreamBroken"]


class Generation:
    """An iterable stream of text pieces; `.text` and `.stats` once consumed."""

    def __init__(self, client: FailoverClient, request: dict):
        self.client, self.request = client, request
        self.stats = Stats()
        self.attempts = Attempts(
            request,
            client.backoff,
            self.stats,
            len(client.servers),
            lambda: client.rendered_prompt(request["text_input"], request.get("apply_chat_template")),
        )
        self.endpoint: str | None = None

    @property
    def text(self) -> str:
        return self.attempts.text

    def __iter__(self) -> Iterator[str]:
        c, a = self.client, self.attempts
        while True:
            body = a.body()
            self.endpoint = c.picker.pick(c.servers, a.tried).url
            a.begin(self.endpoint)
            try:
                for piece in c.transport.stream(self.endpoint, body):
                    a.received(piece.text, piece.tokens)
                    if piece.text:
                        yield piece.text
                return
            except GenerationError as e:
                delay = a.failed(self.endpoint, e)
                if delay is None:
                    return  # the cut came after the last token
                time.sleep(delay)


class HTTPTransport:
    """Triton's generate extension: POST /v2/models/<m>/generate[_stream] (SSE)."""

    def __init__(self, model: str, timeout_s: float, connect_timeout_s: float):
        self.model, self.timeout = model, (connect_timeout_s, timeout_s)

    def _post(self, endpoint: str, path: str, body: dict, stream: bool):
        url = f"http://{endpoint}/v2/models/{self.model}/{path}"
        try:
            r = requests.post(
                url,
                data=json.dumps(body),
                timeout=self.timeout,
                stream=stream,
                headers={"Content-Type": "application/json"},
            )
        except requests.ConnectionError as e:
            raise GenerationError(f"cannot connect: {e}", kind=ErrorKind.UNAVAILABLE, retryable=True) from e
        except requests.Timeout as e:
            raise GenerationError(f"no answer within {self.timeout[1]:g} s: {e}", kind=ErrorKind.TIMEOUT) from e
        if r.status_code != 200:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            r.close()
            raise http_error(r.status_code, f"HTTP {r.status_code}: {msg}")
        return r

    def generate(self, endpoint: str, body: dict) -> str:
        r = self._post(endpoint, "generate", {**body, "stream": False}, stream=False)
        try:
            return r.json()["text_output"]
        except (ValueError, KeyError, requests.RequestException) as e:
            raise GenerationError(f"bad answer: {e}", retryable=True) from e

    def stream(self, endpoint: str, body: dict) -> Iterator[wire.Piece]:
        r = self._post(endpoint, "generate_stream", {**body, "stream": True}, stream=True)
        try:
            for line in r.iter_lines(chunk_size=None):
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:  # an error after the first event arrives under HTTP 200
                    raise StreamBroken(f"error event: {event['error']}")
                piece = wire.event_piece(event)
                if piece is not None:
                    yield piece
        except (requests.RequestException, ConnectionError, ValueError) as e:
            raise StreamBroken(f"stream broke: {type(e).__name__}: {e}") from e
        finally:
            r.close()


class GRPCTransport:
    """tritonclient.grpc: bidirectional streaming (ModelStreamInfer) on the decoupled ensemble."""

    def __init__(self, model: str, timeout_s: float):
        self.model, self.timeout = model, timeout_s

    @staticmethod
    def _error(e) -> GenerationError:
        status = e.status() if hasattr(e, "status") else None
        message = e.message() if hasattr(e, "message") else str(e)
        # No status: an error response inside the stream (the model's or Triton's message).
        return grpc_error(str(status), f"{status}: {message}") if status else in_band_error(message)

    def generate(self, endpoint: str, body: dict) -> str:
        # ModelStreamInfer with stream=false: one response. Works on the decoupled ensemble, where
        # Triton refuses unary ModelInfer (the *_unary twin serves plain unary clients).
        return "".join(p.text for p in self.stream(endpoint, {**body, "stream": False}))

    def stream(self, endpoint: str, body: dict) -> Iterator[wire.Piece]:
        import tritonclient.grpc as g
        from tritonclient.utils import InferenceServerException

        q: queue.Queue = queue.Queue()
        client = g.InferenceServerClient(endpoint)
        started = finished = False
        try:
            client.start_stream(callback=lambda result, error: q.put((result, error)), stream_timeout=self.timeout)
            client.async_stream_infer(
                self.model, wire.infer_inputs({"stream": True, **body}, g), enable_empty_final_response=True
            )
            while True:
                try:
                    result, error = q.get(timeout=self.timeout)
                except queue.Empty:
                    raise StreamBroken(f"no response for {self.timeout} s") from None
                if error is not None:
                    err = self._error(error)
                    if started:  # requests are validated before the first token: this is the server
                        raise StreamBroken(str(err)) from None
                    raise err
                piece = wire.result_piece(result)
                if piece is not None:
                    started = True
                    yield piece
                if wire.is_final(result.get_response()):
                    finished = True
                    return
        except InferenceServerException as e:
            # A stream that failed before our request went out reports why through the callback.
            try:
                e = q.get(timeout=1.0)[1] or e
            except queue.Empty:
                pass
            raise self._error(e) from None
        finally:
            # A stream that got its final response is closed from our side and read to the server's end,
            # never cancelled: Triton 2.51's gRPC frontend leaks a stream cancelled while that response's
            # write completes, and the leak keeps the ensemble loaded until SIGTERM's exit timeout
            # (docs/cancellation.md section 4). A stream given up early (an error, a caller that stops
            # reading) is cancelled: that is how Triton learns to stop its generation.
            try:
                client.stop_stream(cancel_requests=not finished)
            except Exception:  # noqa: BLE001 - the channel may already be dead; nothing to clean
                pass
            client.close()


class FailoverClient:
    """endpoints: host:port of Triton servers or of the load balancer (HTTP or gRPC ports, per
    protocol). idle_timeout_s: a request or stream with no response for this long counts as broken
    (retried or resumed); keep it above the longest wait for a first token under load. start: index
    of the endpoint the first request goes to (default random, so that many clients spread)."""

    def __init__(
        self,
        endpoints: list[str] | str,
        *,
        protocol: str = "http",
        model: str = "ensemble",
        tokenizer_dir: str | None = None,
        apply_chat_template: bool = True,
        max_attempts: int = SPEC.max_attempts,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
        idle_timeout_s: float = 120,
        connect_timeout_s: float = 3.0,
        start: int | None = None,
    ):
        endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not endpoints:
            raise ValueError("at least one endpoint is needed")
        self.servers = [Server(e) for e in endpoints]
        self.protocol = protocol
        if protocol == "http":
            self.transport = HTTPTransport(model, idle_timeout_s, connect_timeout_s)
        elif protocol == "grpc":
            self.transport = GRPCTransport(model, idle_timeout_s)
        else:
            raise ValueError(f"protocol must be http or grpc, not {protocol!r}")
        self.tokenizer_dir, self.chat_default = tokenizer_dir, apply_chat_template
        self.backoff = Backoff(backoff_s, max_backoff_s, max_attempts)
        self.picker = Picker(start)

    @property
    def endpoints(self) -> list[str]:
        return [s.url for s in self.servers]

    def rendered_prompt(self, prompt: str, chat: bool | None) -> str:
        if not (self.chat_default if chat is None else chat):
            return prompt
        if not self.tokenizer_dir:
            raise GenerationError(
                "cannot resume a chat-template stream without tokenizer_dir "
                "(or send raw prompts with apply_chat_template=false)"
            )
        from ..text.tokenizer import (
            load_hf_tokenizer,  # late: transformers only when a resume needs it
        )

        tok = load_hf_tokenizer(self.tokenizer_dir)
        return tok.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )

    def stream(self, text: str, max_tokens: int, **params) -> Generation:
        """Stream the answer, resuming on another endpoint if the stream breaks. Extra ensemble inputs
        (temperature, stop_words, apply_chat_template, ...) go in **params."""
        return Generation(self, wire.ensemble_body(text, max_tokens, **params))

    def generate(self, text: str, max_tokens: int, *, stats: Stats | None = None, **params) -> str:
        """The whole answer in one response, retried on another endpoint when that is safe."""
        body = wire.ensemble_body(text, max_tokens, **params)
        a = Attempts(body, self.backoff, stats if stats is not None else Stats(), len(self.servers), lambda: text)
        while True:
            endpoint = self.picker.pick(self.servers, a.tried).url
            a.begin(endpoint)
            try:
                return self.transport.generate(endpoint, body)
            except GenerationError as e:
                time.sleep(a.failed(endpoint, e))  # never None: no tokens count before the whole answer
