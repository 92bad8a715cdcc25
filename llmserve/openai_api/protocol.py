"""Request models for /v1/chat/completions and /v1/completions, validated once at the edge.

What we honour: `model`, `messages` / `prompt`, `max_tokens` / `max_completion_tokens`, `stop`
(string or list), `temperature`, `top_p`, `seed`, `presence_penalty`, `frequency_penalty`, `stream`,
`stream_options.include_usage`, `user` (accepted; it names the end user for the caller's records),
and vLLM's extensions that the engine implements (`top_k`, `min_tokens`, `repetition_penalty`,
`ignore_eos`; the `openai` SDK sends them with `extra_body`).

What we refuse (400 naming the field, never silently ignored): OpenAI fields we cannot honour
(`n` > 1, `tools`, `response_format` other than text, `logit_bias`, `logprobs`, `best_of` > 1,
`suffix`, `echo`, ...), fields OpenAI does not have ("Unrecognized request argument supplied"),
and values of the wrong type or range. A field sent with its default value (`n: 1`,
`logprobs: false`, `response_format: {"type": "text"}`, `tool_choice: "none"`, ...) asks for
nothing we do not do and is accepted.

`logprobs` is refused although the engine computes a log-probability per token: the ensemble
returns them per streamed chunk without the tokens they belong to, and OpenAI's format needs the
tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import bad_request, unsupported


class _Strict(BaseModel):
    # strict: "5" is not an integer and 1 is not a boolean, as in OpenAI's own API.
    model_config = ConfigDict(extra="forbid", strict=True)


def _default(*allowed) -> Callable[[Any], bool]:
    return lambda v: v is None or any(v == a and type(v) is type(a) for a in allowed)


# Field -> "this value asks for nothing beyond what we do". Anything else is a 400 naming the field.
_COMMON_UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "n": _default(1),
    "logit_bias": lambda v: v is None or v == {},
    "service_tier": _default("auto", "default"),
    "store": _default(False),
    "metadata": lambda v: v is None,
    "prediction": lambda v: v is None,
}
CHAT_UNSUPPORTED = {
    **_COMMON_UNSUPPORTED,
    "tools": lambda v: v is None or v == [],
    "tool_choice": _default("none"),
    "parallel_tool_calls": lambda v: True if v is None else isinstance(v, bool),  # meaningless without tools
    "functions": lambda v: v is None or v == [],
    "function_call": _default("none"),
    "response_format": lambda v: v is None or v == {"type": "text"},
    "logprobs": _default(False),
    "top_logprobs": _default(0),
    "modalities": lambda v: v is None or v == ["text"],
    "audio": lambda v: v is None,
    "reasoning_effort": lambda v: v is None,
    "web_search_options": lambda v: v is None,
    "verbosity": lambda v: v is None,
}
COMPLETION_UNSUPPORTED = {
    **_COMMON_UNSUPPORTED,
    "best_of": _default(1),
    "echo": _default(False),
    "logprobs": _default(0),
    "suffix": lambda v: v is None or v == "",
}
MESSAGE_UNSUPPORTED = {
    "name": lambda v: v is None,
    "tool_calls": lambda v: v is None or v == [],
    "tool_call_id": lambda v: v is None,
    "function_call": lambda v: v is None,
    "refusal": lambda v: v is None,
    "audio": lambda v: v is None,
}
WHY = {
    "n": "one choice per request; send several requests",
    "best_of": "one choice per request",
    "logprobs": "the ensemble returns log-probabilities without the tokens they belong to",
    "top_logprobs": "the engine returns only the chosen token's log-probability",
    "tools": "no tool calling",
    "tool_choice": "no tool calling",
    "functions": "no tool calling",
    "function_call": "no tool calling",
    "response_format": 'no structured output; only {"type": "text"}',
    "logit_bias": "the engine has no logit bias",
    "suffix": "no insertion (fill-in-the-middle)",
    "echo": "the prompt is not returned",
}


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class Sampling(_Strict):
    """Fields shared by both endpoints."""

    model: str
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # vLLM extensions the engine implements.
    top_k: int | None = Field(default=None, ge=-1)
    min_tokens: int | None = Field(default=None, ge=0)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    ignore_eos: bool = False
    # Accepted with their default value only (see *_UNSUPPORTED); typed loosely so that the
    # unsupported check, not a type error, answers.
    n: Any | None = None
    logit_bias: Any | None = None
    service_tier: Any | None = None
    store: Any | None = None
    metadata: Any | None = None
    prediction: Any | None = None
    logprobs: Any | None = None

    def stop_words(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    tools: Any | None = None
    tool_choice: Any | None = None
    parallel_tool_calls: Any | None = None
    functions: Any | None = None
    function_call: Any | None = None
    response_format: Any | None = None
    top_logprobs: Any | None = None
    modalities: Any | None = None
    audio: Any | None = None
    reasoning_effort: Any | None = None
    web_search_options: Any | None = None
    verbosity: Any | None = None

    def requested_max_tokens(self) -> tuple[int | None, str]:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


class CompletionRequest(Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: Any | None = None
    echo: Any | None = None
    suffix: Any | None = None

    def requested_max_tokens(self) -> tuple[int | None, str]:
        return self.max_tokens, "max_tokens"

    def prompt_text(self) -> str:
        p = self.prompt
        if isinstance(p, str):
            return p
        if p and all(isinstance(x, str) for x in p):
            if len(p) != 1:
                raise bad_request("prompt", f"one prompt per request, got a list of {len(p)}")
            return p[0]
        raise unsupported("prompt", "token-id prompts; send text")


def param_of(loc: tuple) -> str:
    """('messages', 0, 'role') -> 'messages[0].role' (pydantic locations may include union branch names)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[TextPart]", "list[str]", "list[int]", "list[list[int]]", "TextPart") or "[" in str(
            part
        ):
            continue  # union branch labels, not fields
        else:
            out += ("." if out else "") + str(part)
    return out


def _check_unsupported(data: dict, table: dict, prefix: str = "") -> None:
    for key, ok in table.items():
        if key in data and not ok(data[key]):
            raise unsupported(prefix + key, WHY.get(key, ""))


def parse(kind: type[ChatCompletionRequest] | type[CompletionRequest], data: Any):
    """The request as a typed object, or an APIError(400) naming the first field at fault."""
    if not isinstance(data, dict):
        raise bad_request(None, "the request body must be a JSON object")
    _check_unsupported(data, CHAT_UNSUPPORTED if kind is ChatCompletionRequest else COMPLETION_UNSUPPORTED)
    if kind is ChatCompletionRequest and isinstance(data.get("messages"), list):
        for i, m in enumerate(data["messages"]):
            if isinstance(m, dict):
                _check_unsupported(m, MESSAGE_UNSUPPORTED, f"messages[{i}].")
                if m.get("role") in ("tool", "function"):
                    raise unsupported(f"messages[{i}].role", f"'{m['role']}' messages (no tool calling)")
                for j, part in enumerate(m["content"] if isinstance(m.get("content"), list) else []):
                    if isinstance(part, dict) and part.get("type") != "text":
                        raise unsupported(f"messages[{i}].content[{j}].type", "text parts only (a text model)")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        # An unknown field first; otherwise the deepest location (for a union, the branch that got
        # furthest: a content list with a bad part, not "content is not a string").
        err = next((x for x in errors if x["type"] == "extra_forbidden"), None) or max(
            errors, key=lambda x: len(x["loc"])
        )
        param = param_of(err["loc"])
        if err["type"] == "extra_forbidden":
            raise bad_request(param, f"Unrecognized request argument supplied: {param}") from None
        if err["type"] == "missing":
            raise bad_request(param, f"Missing required parameter: '{param}'.") from None
        raise bad_request(param, f"Invalid value for '{param}': {err['msg']}") from None
