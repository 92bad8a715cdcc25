"""A failover client for the ensemble: several endpoints (or one load balancer), retries of what is
safe to retry, and streams that survive the loss of the server that was generating them.

    client = FailoverClient(["localhost:8000"], tokenizer_dir="build/checkpoints/smollm2-135m-instruct")
    text = client.generate("What is the capital of France?", 32)
    for piece in client.stream("Write a haiku about the sea.", 48):
        print(piece, end="", flush=True)

Retried (on the next endpoint, with backoff): connection refused/reset before an answer, HTTP
429, 500, 502, 503 and 504 (RETRY_HTTP), gRPC UNAVAILABLE / RESOURCE_EXHAUSTED / INTERNAL /
CANCELLED / UNKNOWN before any token. Never retried: other 4xx (the request is wrong), 501/505, gRPC
INVALID_ARGUMENT and the like. Generation has no side effects, so re-sending is safe; what is not
retried would fail the same way everywhere.

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
import random
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np
import requests

from ..contract import ENSEMBLE_INPUTS

RETRY_HTTP = {429, 500, 502, 503, 504}
GRPC_RETRY = {"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED", "StatusCode.INTERNAL",
              "StatusCode.CANCELLED", "StatusCode.UNKNOWN", "StatusCode.DEADLINE_EXCEEDED", "StatusCode.ABORTED"}


def resume_request(request: dict, prompt_seen: str, text: str, tokens: int) -> dict:
    """The request that continues a stream elsewhere after `tokens` tokens produced `text`: the
    prompt as the model saw it + the text so far, no chat template (it is in prompt_seen), the
    remaining budget (min_tokens reduced alike). Shared with the OpenAI frontend (openai_api/triton.py)."""
    body = {**request, "text_input": prompt_seen + text, "apply_chat_template": False,
            "max_tokens": request["max_tokens"] - tokens}
    if "min_tokens" in request:
        body["min_tokens"] = max(0, request["min_tokens"] - tokens)
    return body


class GenerationError(Exception):
    """A failure the client did not (or could no longer) retry; `retryable` says which kind."""

    def __init__(self, message: str, *, status: Optional[int | str] = None, retryable: bool = False):
        super().__init__(message)
        self.status, self.retryable = status, retryable


class StreamBroken(Exception):
    """The stream stopped after some tokens: resume it elsewhere."""


@dataclass
class Stats:
    attempts: int = 0
    """Requests sent (first try + retries + resumes)."""
    retries: int = 0
    """Re-sent before any token arrived."""
    resumes: int = 0
    """Streams continued on another endpoint after tokens had arrived."""
    tokens: int = 0
    endpoints: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Generation:
    """An iterable stream of text pieces; `.text` and `.stats` once consumed."""

    def __init__(self, client: "FailoverClient", request: dict):
        self.client, self.request = client, request
        self.stats = Stats()
        self.pieces: list[str] = []
        self.endpoint: Optional[str] = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def __iter__(self) -> Iterator[str]:
        c, req = self.client, self.request
        budget = req["max_tokens"]
        base: Optional[str] = None  # the prompt as the model saw it; set on the first resume
        failures = 0
        while True:
            body = dict(req)
            if self.stats.tokens:
                if base is None:
                    base = c.rendered_prompt(req["text_input"], req.get("apply_chat_template"))
                body = resume_request(req, base, self.text, self.stats.tokens)
            self.endpoint = c.pick()
            self.stats.attempts += 1
            self.stats.endpoints.append(self.endpoint)
            try:
                for text, ntok in c.transport.stream(self.endpoint, body):
                    self.stats.tokens += ntok
                    if text:
                        self.pieces.append(text)
                        yield text
                return
            except (StreamBroken, GenerationError) as e:
                if isinstance(e, GenerationError) and not e.retryable:
                    raise
                self.stats.errors.append(f"{self.endpoint}: {e}")
                if self.stats.tokens >= budget:
                    return  # the cut came after the last token
                if self.stats.tokens:
                    self.stats.resumes += 1
                else:
                    self.stats.retries += 1
                failures += 1
                if failures >= c.max_attempts:
                    raise GenerationError(f"gave up after {failures} failed attempts: {e}", retryable=True) from e
                c.backoff(failures)


class HTTPTransport:
    """Triton's generate extension: POST /v2/models/<m>/generate[_stream] (SSE)."""

    def __init__(self, model: str, timeout_s: float, connect_timeout_s: float):
        self.model, self.timeout = model, (connect_timeout_s, timeout_s)

    def _post(self, endpoint: str, path: str, body: dict, stream: bool):
        url = f"http://{endpoint}/v2/models/{self.model}/{path}"
        try:
            r = requests.post(url, data=json.dumps(body), timeout=self.timeout, stream=stream,
                              headers={"Content-Type": "application/json"})
        except requests.ConnectionError as e:
            raise GenerationError(f"cannot reach {endpoint}: {e}", retryable=True) from e
        except requests.Timeout as e:
            raise GenerationError(f"timeout from {endpoint}: {e}", retryable=False) from e
        if r.status_code != 200:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            r.close()
            raise GenerationError(f"HTTP {r.status_code}: {msg}", status=r.status_code,
                                  retryable=r.status_code in RETRY_HTTP)
        return r

    def generate(self, endpoint: str, body: dict) -> str:
        r = self._post(endpoint, "generate", {**body, "stream": False}, stream=False)
        try:
            return r.json()["text_output"]
        except (ValueError, KeyError, requests.RequestException) as e:
            raise GenerationError(f"bad answer from {endpoint}: {e}", retryable=True) from e

    def stream(self, endpoint: str, body: dict) -> Iterator[tuple[str, int]]:
        r = self._post(endpoint, "generate_stream", {**body, "stream": True}, stream=True)
        try:
            for line in r.iter_lines(chunk_size=None):
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:  # an error after the first event arrives under HTTP 200
                    raise StreamBroken(f"error event: {event['error']}")
                lp = event.get("output_log_probs")
                n = len(lp) if isinstance(lp, list) else 1
                yield event.get("text_output", ""), n
        except (requests.RequestException, ConnectionError, ValueError) as e:
            raise StreamBroken(f"stream from {endpoint} broke: {type(e).__name__}: {e}") from e
        finally:
            r.close()


class GRPCTransport:
    """tritonclient.grpc: bidirectional streaming (ModelStreamInfer) on the decoupled ensemble."""

    def __init__(self, model: str, timeout_s: float):
        self.model, self.timeout = model, timeout_s

    @staticmethod
    def _inputs(body: dict):
        import tritonclient.grpc as g

        kinds = {t.name: t for t in ENSEMBLE_INPUTS}
        out = []
        for name, value in body.items():
            t = kinds[name]
            if t.dtype == "STRING":
                arr = np.array([[v.encode() for v in (value if isinstance(value, list) else [value])]], dtype=object)
                dt = "BYTES"
            else:
                arr = np.array([[value]], dtype=t.np_dtype)
                dt = t.dtype
            i = g.InferInput(name, list(arr.shape), dt)
            i.set_data_from_numpy(arr)
            out.append(i)
        return out

    @staticmethod
    def _error(e, endpoint: str) -> GenerationError:
        status = str(e.status()) if hasattr(e, "status") and e.status() else "UNKNOWN"
        return GenerationError(f"{endpoint}: {status}: {e.message() if hasattr(e, 'message') else e}",
                               status=status, retryable=status in GRPC_RETRY)

    def generate(self, endpoint: str, body: dict) -> str:
        # ModelStreamInfer with stream=false: one response. Works on the decoupled ensemble, where
        # Triton refuses unary ModelInfer (the *_unary twin serves plain unary clients).
        try:
            return "".join(t for t, _ in self.stream(endpoint, {**body, "stream": False}))
        except StreamBroken as e:
            raise GenerationError(str(e), retryable=True) from e

    def stream(self, endpoint: str, body: dict) -> Iterator[tuple[str, int]]:
        import tritonclient.grpc as g
        from tritonclient.utils import InferenceServerException

        q: queue.Queue = queue.Queue()
        client = g.InferenceServerClient(endpoint)
        started = False
        try:
            client.start_stream(callback=lambda result, error: q.put((result, error)),
                                stream_timeout=self.timeout)
            client.async_stream_infer(self.model, self._inputs({"stream": True, **body}),
                                      enable_empty_final_response=True)
            while True:
                try:
                    result, error = q.get(timeout=self.timeout)
                except queue.Empty:
                    raise StreamBroken(f"no response from {endpoint} for {self.timeout} s") from None
                if error is not None:
                    err = self._error(error, endpoint)
                    if started:  # requests are validated before the first token: this is the server
                        raise StreamBroken(str(err)) from None
                    raise err
                resp = result.get_response()
                text = result.as_numpy("text_output")
                if text is not None:
                    started = True
                    lp = result.as_numpy("output_log_probs")
                    yield b"".join(text.reshape(-1)).decode(), (int(lp.size) if lp is not None else 1)
                final = resp.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    return
        except InferenceServerException as e:
            # A stream that failed before our request went out reports why through the callback.
            try:
                _, e = q.get(timeout=1.0)
            except queue.Empty:
                pass
            err = self._error(e, endpoint)
            if not started and err.status == "UNKNOWN":
                err.retryable = True  # nothing was sent: the channel itself failed
            raise err from None
        finally:
            try:
                client.stop_stream(cancel_requests=True)
            except Exception:  # noqa: BLE001 - the channel may already be dead; nothing to clean
                pass
            client.close()


class FailoverClient:
    """endpoints: host:port of Triton servers or of the load balancer (HTTP or gRPC ports, per
    protocol). idle_timeout_s: a request or stream with no response for this long counts as broken
    (retried or resumed); keep it above the longest wait for a first token under load."""

    def __init__(self, endpoints: list[str] | str, *, protocol: str = "http", model: str = "ensemble",
                 tokenizer_dir: Optional[str] = None,
                 apply_chat_template: bool = True, max_attempts: int = 6, backoff_s: float = 0.1,
                 max_backoff_s: float = 2.0, idle_timeout_s: float = 120, connect_timeout_s: float = 3.0):
        self.endpoints = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        if not self.endpoints:
            raise ValueError("at least one endpoint is needed")
        self.protocol = protocol
        if protocol == "http":
            self.transport = HTTPTransport(model, idle_timeout_s, connect_timeout_s)
        elif protocol == "grpc":
            self.transport = GRPCTransport(model, idle_timeout_s)
        else:
            raise ValueError(f"protocol must be http or grpc, not {protocol!r}")
        self.tokenizer_dir, self.chat_default = tokenizer_dir, apply_chat_template
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self._next = random.randrange(len(self.endpoints))

    def pick(self) -> str:
        """Round robin over the endpoints; after a failure the next one (another server)."""
        self._next = (self._next + 1) % len(self.endpoints)
        return self.endpoints[self._next]

    def backoff(self, failures: int) -> None:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))
        time.sleep(delay * (0.5 + random.random() / 2))

    def rendered_prompt(self, prompt: str, chat: Optional[bool]) -> str:
        if not (self.chat_default if chat is None else chat):
            return prompt
        if not self.tokenizer_dir:
            raise GenerationError("cannot resume a chat-template stream without tokenizer_dir "
                                  "(or send raw prompts with apply_chat_template=false)")
        from ..text.tokenizer import (
            load_hf_tokenizer,  # late: transformers only when a resume needs it
        )

        tok = load_hf_tokenizer(self.tokenizer_dir)
        return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)

    @staticmethod
    def _request(text: str, max_tokens: int, params: dict) -> dict:
        return {"text_input": text, "max_tokens": int(max_tokens), **params}

    def stream(self, text: str, max_tokens: int, **params) -> Generation:
        """Stream the answer, resuming on another endpoint if the stream breaks. Extra ensemble inputs
        (temperature, stop_words, apply_chat_template, ...) go in **params."""
        return Generation(self, self._request(text, max_tokens, params))

    def generate(self, text: str, max_tokens: int, *, stats: Optional[Stats] = None, **params) -> str:
        """The whole answer in one response, retried on another endpoint when that is safe."""
        body = self._request(text, max_tokens, params)
        stats = stats if stats is not None else Stats()
        failures = 0
        while True:
            endpoint = self.pick()
            stats.attempts += 1
            stats.endpoints.append(endpoint)
            try:
                return self.transport.generate(endpoint, body)
            except GenerationError as e:
                stats.errors.append(f"{endpoint}: {e}")
                if not e.retryable:
                    raise
                failures += 1
                stats.retries += 1
                if failures >= self.max_attempts:
                    raise GenerationError(f"gave up after {failures} failed attempts: {e}", status=e.status,
                                          retryable=True) from e
                self.backoff(failures)
