"""One completion, from a parsed request to pieces of text, with usage, finish reason and metrics.

The ensemble gets the rendered prompt (`apply_chat_template=false`) and streams (`stream=true`).
Tokens are counted exactly from each response's `output_log_probs` (one per token: postprocessing
answers zeros when the engine sent none); `return_log_probs=true` is set only when the request asks
for log probs, since the engines (TensorRT-LLM's backend, and the torch engine like it) then send two
tensors more with every response.

finish_reason: the engine ends a request at the end token or a stop word ("stop") or when it has
generated `max_tokens` ("length"); the end token and a stop word's tokens are not output, so
"length" is exactly "as many tokens out as max_tokens"."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from ..client.aio import EnsembleClient, GenerationError, Piece, Stats
from ..client.wire import ENSEMBLE_TYPES
from ..contract import ENSEMBLE_TO_ENGINE, STOP_MATCH_TEXT, STOP_WORDS_MATCH
from ..spec.deployment import Serving
from ..spec.openai import OpenAIFrontend
from ..text.stream_text import StreamText
from .errors import APIError, from_client_error, unsupported
from .metrics import Metrics
from .prompts import Limits, Prompt, PromptBuilder
from .protocol import ChatCompletionRequest, CompletionRequest, parse
from .responses import usage
from .tokens import TokenText
from .tools import Guide, Reply, reply_for

log = logging.getLogger(__name__)
_SPEC = OpenAIFrontend()
# The ensemble's guided-decoding and top-log-prob inputs (upstream's names).
# Requests up to this size are templated and tokenized on the event loop (about 0.5 ms for 4 KiB): a
# hop to a thread and back costs more than that once the loop is busy, since the thread waits for the
# GIL behind it (up to the 5 ms switch interval per handover), and that wait was time to first token.
INLINE_BUILD_BYTES = 16 * 1024
# The sampling inputs a request may set, by their ensemble names (contract.ENSEMBLE_TO_ENGINE: the engine's).
SAMPLING = (
    "min_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
GUIDE_TYPE, GUIDE, TOP_LOG_PROBS = "guided_decoding_guide_type", "guided_decoding_guide", "num_top_log_probs"


@dataclass(frozen=True)
class Settings:
    model: str
    """The served model name (`model` in requests and /v1/models)."""
    tokenizer_dir: str
    endpoints: list[str]
    """Triton gRPC host:port, one per server."""
    limits: Limits
    add_special_tokens: bool = False
    trust_remote_code: bool = False
    api_keys: list[str] = field(default_factory=list)
    # The spec's defaults (settings_from_spec passes the spec's values; these serve Settings built by hand).
    idle_timeout_s: float = _SPEC.idle_timeout(Serving().request_timeout_s)
    max_attempts: int = _SPEC.max_attempts
    health_interval_s: float = _SPEC.health_interval_s
    token_model: str | None = None
    """The token-level model this frontend streams from itself (tensorrt_llm, or on the tensorrtllm
    layout the C++ backend's model behind the relay): the prompt's tokens go to it, and the text is
    decoded and stop strings matched here. None: every request goes through the ensemble."""
    skip_special_tokens: bool = True
    http_endpoints: list[str] | None = None
    """The same servers' HTTP host:port, in order: the token-level route reads them
    (openai.token_transport: http); None: it reads gRPC."""
    drained_file: str | None = None
    """Endpoints listed there (one per line) get no new requests: a rolling restart is about to stop
    them (client/aio.py)."""
    created: int = field(default_factory=lambda: int(time.time()))


class Run:
    """One choice's generation (one engine request): iterate `pieces()` once (or `collect()`).
    `choice`: its place among the request's generations (seeds differ per choice); `guide`: what the
    engine enforces (tools.py)."""

    def __init__(
        self,
        service: Service,
        req,
        prompt: Prompt,
        request_id: str,
        arrival: float,
        *,
        choice: int = 0,
        guide: Guide | None = None,
    ):
        self.service, self.req, self.prompt, self.id, self.arrival = service, req, prompt, request_id, arrival
        self.choice, self.guide = choice, guide
        self.trace = Stats()
        self.first_at: float | None = None
        self.done = False

    @property
    def completion_tokens(self) -> int:
        return self.trace.tokens

    @property
    def finish_reason(self) -> str:
        return "length" if self.trace.tokens >= self.prompt.max_tokens else "stop"

    def usage(self) -> dict:
        return usage(self.prompt.tokens, self.trace.tokens)

    async def pieces(self) -> AsyncIterator[Piece]:
        s, m = self.service, self.service.metrics
        m.running.inc()
        outcome: str | None = "abort"  # unless it ends normally or with an error
        last = None
        try:
            async with aclosing(s.stream(self.req, self.prompt, self.id, self.trace, self.choice, self.guide)) as gen:
                async for p in gen:
                    now = time.monotonic()
                    if p.tokens:
                        if self.first_at is None:
                            self.first_at = now
                            m.ttft.observe(now - self.arrival)
                        elif last is not None:
                            per = (now - last) / p.tokens
                            for _ in range(p.tokens):
                                m.itl.observe(per)
                        last = now
                    yield p
            self.done = True
            outcome = self.finish_reason
        except (APIError, GenerationError) as e:
            outcome = None
            api = e if isinstance(e, APIError) else from_client_error(e)
            if api.status == 400 and self.guide is not None and "guided_decoding" in api.message:
                api.param = self.guide.param  # the engine names its input; the client's field is this
            elif api.status == 400 and TOP_LOG_PROBS in api.message:
                api.param = "top_logprobs" if isinstance(self.req, ChatCompletionRequest) else "logprobs"
            m.error(api.status)
            if api is e:
                raise
            raise api from None
        finally:
            m.running.dec()
            self._record(outcome)

    def _record(self, outcome: str | None) -> None:
        m, t = self.service.metrics, self.trace
        # Each failed attempt with its cause (the access line counts retries and resumes); the
        # Triton request id of attempt n is `<request id>-<n>`.
        for n, why in enumerate(t.errors, 1):  # the failed attempts are the first ones
            log.warning("attempt %d failed: %s", n, why)
        log.debug("Triton: %s, %d attempts, %d tokens", ", ".join(t.endpoints) or "not sent", t.attempts, t.tokens)
        m.retries.inc(t.retries)
        m.resumes.inc(t.resumes)
        if t.dispatched_at is not None:
            m.queue.observe(t.dispatched_at - self.arrival)
        m.generation_tokens.inc(t.tokens)
        if outcome is None:
            return
        m.success[outcome].inc()
        if outcome != "abort":
            m.e2e.observe(time.monotonic() - self.arrival)
            m.prompt_tokens.inc(self.prompt.tokens)
            m.req_prompt.observe(self.prompt.tokens)
            m.req_generation.observe(t.tokens)

    async def collect(self) -> str:
        parts = []
        async with aclosing(self.pieces()) as gen:
            async for p in gen:
                parts.append(p.text)
        return "".join(parts)


class Service:
    def __init__(
        self, settings: Settings, *, builder: PromptBuilder | None = None, client: EnsembleClient | None = None
    ):
        self.settings = settings
        self.builder = builder or PromptBuilder(
            settings.tokenizer_dir,
            settings.limits,
            add_special_tokens=settings.add_special_tokens,
            trust_remote_code=settings.trust_remote_code,
        )
        self.client = client or EnsembleClient(
            settings.endpoints,
            idle_timeout_s=settings.idle_timeout_s,
            max_attempts=settings.max_attempts,
            health_interval_s=settings.health_interval_s,
            drained_file=settings.drained_file,
            http_endpoints=settings.http_endpoints,
        )
        self.token_text = TokenText(self.builder.tok)
        tok = self.builder.tok  # end and pad tokens as preprocessing picks them
        self.end_id = tok.eos_token_id
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.end_id
        lim = settings.limits
        self.metrics = Metrics(settings.model, lim.max_input_len + lim.max_output_len)

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()

    def model_card(self) -> dict:
        return {
            "id": self.settings.model,
            "object": "model",
            "created": self.settings.created,
            "owned_by": "llmserve",
            "max_model_len": self.settings.limits.max_input_len + self.settings.limits.max_output_len,
        }

    def check_model(self, name: str) -> None:
        if name != self.settings.model:
            raise APIError(404, f"The model `{name}` does not exist.", param="model", code="model_not_found")

    async def prepare(
        self, kind: type, data, size: int = 0
    ) -> tuple[ChatCompletionRequest | CompletionRequest, list[Prompt], Reply]:
        """size: the request body's bytes, which bound the work of templating and tokenizing."""
        req = parse(kind, data)
        self.check_model(req.model)
        reply = reply_for(req) if isinstance(req, ChatCompletionRequest) else Reply("text")
        self.check_engine(req, reply)
        if size <= INLINE_BUILD_BYTES:
            return req, self.builder.build(req, reply), reply
        # A long prompt is off the event loop (the tokenizer releases the GIL), so streams keep flowing.
        prompts = await asyncio.to_thread(self.builder.build, req, reply)
        return req, prompts, reply

    @staticmethod
    def check_engine(req, reply: Reply) -> None:
        """Refuse, by the client's field, what the ensemble behind us cannot do."""
        if reply.guide is not None and GUIDE_TYPE not in ENSEMBLE_TYPES:
            raise unsupported(reply.guide.param.split(".")[0].split("[")[0], "this engine has no guided decoding")
        if req.top_k_logprobs and TOP_LOG_PROBS not in ENSEMBLE_TYPES:
            name = "top_logprobs" if isinstance(req, ChatCompletionRequest) else "logprobs"
            raise unsupported(name, "this engine returns only the chosen token's log-probability (use 0)")

    def token_level(self, req, guide: Guide | None) -> bool:
        """Whether a request goes to the token-level model itself: everything but guided decoding and
        top log-probs, which the ensemble's engine step adds (the relay computes top log-probs)."""
        return self.settings.token_model is not None and guide is None and not req.top_k_logprobs

    def stream(
        self, req, prompt: Prompt, request_id: str, trace: Stats, choice: int, guide: Guide | None
    ) -> AsyncIterator[Piece]:
        """One generation's pieces, from the token-level model or through the ensemble."""
        if self.token_level(req, guide):
            text = StreamText(self.builder.tok.backend_tokenizer, prompt.stop, self.settings.skip_special_tokens)
            body = self.token_body(req, prompt, choice=choice)
            return self.client.generate_tokens(body, request_id, trace, text, self.settings.token_model)
        return self.client.generate(self.ensemble_body(req, prompt, choice=choice, guide=guide), request_id, trace)

    def token_body(self, req, prompt: Prompt, *, choice: int = 0) -> dict:
        """The token-level request of one generation: the prompt's ids, the same sampling as the
        ensemble's request (under the engine's names), streamed, the prompt not echoed."""
        ens = self.ensemble_body(req, prompt, choice=choice)
        body = {
            "input_ids": prompt.ids,
            "input_lengths": len(prompt.ids),
            "request_output_len": prompt.max_tokens,
            "end_id": self.end_id,
            "pad_id": self.pad_id,
            "streaming": True,
            "exclude_input_in_output": True,
            "return_log_probs": ens["return_log_probs"],
        }
        for name in SAMPLING:
            if name in ens:
                body[ENSEMBLE_TO_ENGINE.get(name, name)] = ens[name]
        return body

    @staticmethod
    def ensemble_body(
        req: ChatCompletionRequest | CompletionRequest, prompt: Prompt, *, choice: int = 0, guide: Guide | None = None
    ) -> dict:
        body = {
            "text_input": prompt.text,
            "max_tokens": prompt.max_tokens,
            "stream": True,
            "apply_chat_template": False,
            "exclude_input_in_output": True,
            "return_log_probs": req.top_k_logprobs is not None,
        }
        if prompt.stop:
            # OpenAI's `stop` is a string the text must not contain: matched on the text, cut from the
            # answer (the ensemble's default is TensorRT-LLM's token sequences).
            body["stop_words"] = prompt.stop
            body[STOP_WORDS_MATCH] = STOP_MATCH_TEXT
        if prompt.min_tokens:
            body["min_tokens"] = prompt.min_tokens
        for name in SAMPLING[1:]:  # (min_tokens: set above)
            value = getattr(req, name)
            if value is not None and not (name == "top_k" and value == -1):  # vLLM's -1: no top-k
                body[name] = value
        # OpenAI's top_p defaults to 1 (sample from the whole distribution). The ensemble follows
        # TensorRT-LLM, where an absent top_p is 0 and temperature alone is greedy: say it explicitly.
        body.setdefault("top_p", 1.0)
        if choice and "seed" in body:
            # The choices of one seeded request differ from each other and are each reproducible.
            body["seed"] = (body["seed"] + choice) % 2**64
        if guide is not None:
            body[GUIDE_TYPE], body[GUIDE] = guide.type, guide.text
        if req.top_k_logprobs:
            body[TOP_LOG_PROBS] = req.top_k_logprobs
        return body
