"""Request models for /v1/chat/completions and /v1/completions, validated once at the edge.

What we honour: `model`, `messages` / `prompt` (a string or a list of strings), `max_tokens` /
`max_completion_tokens`, `stop` (string or list), `temperature`, `top_p`, `seed`,
`presence_penalty`, `frequency_penalty`, `stream`, `stream_options.include_usage`, `user` and
`safety_identifier` (accepted; they name the end user for the caller's records), `n` (up to MAX_N),
`best_of` and `echo` (completions), `logprobs` (chat: bool, completions: 0-5) and `top_logprobs`
(chat, 0-20; above 0 when the engine returns alternatives), `response_format` (text, json_object,
json_schema) and `tools` / `tool_choice` / `parallel_tool_calls` (guided decoding, tools.py), `tool`
messages and assistant `tool_calls` in the history, and vLLM's extensions that the engine
implements (`top_k`, `min_tokens`, `repetition_penalty`, `ignore_eos`; the `openai` SDK sends them
with `extra_body`).

What we refuse (400 naming the field, never silently ignored): OpenAI fields we cannot honour
(CHAT_UNSUPPORTED, COMPLETION_UNSUPPORTED, MESSAGE_UNSUPPORTED: `logit_bias`, `suffix`, the
deprecated `functions` / `function_call`, audio, prompt caching, ...), `echo` with `logprobs`,
fields OpenAI does not have ("Unrecognized request argument supplied"), values of the wrong type or
range, and fields that are wrong together (top_logprobs without logprobs, best_of < n, a tool_choice
naming no tool, ...). A field sent with its default value (`logit_bias: {}`, `store: false`, ...)
asks for nothing we do not do and is accepted."""

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
    "logit_bias": lambda v: v is None or v == {},
    "service_tier": _default("auto", "default"),
    "store": _default(False),
    "metadata": lambda v: v is None,
    "prediction": lambda v: v is None,
}
CHAT_UNSUPPORTED = {
    **_COMMON_UNSUPPORTED,
    "functions": lambda v: v is None or v == [],
    "function_call": _default("none"),
    "modalities": lambda v: v is None or v == ["text"],
    "audio": lambda v: v is None,
    "reasoning_effort": lambda v: v is None,
    "web_search_options": lambda v: v is None,
    "verbosity": lambda v: v is None,
    "prompt_cache_key": lambda v: v is None,
    "prompt_cache_retention": lambda v: v is None,
    "prompt_cache_options": lambda v: v is None,
    "moderation": lambda v: v is None,
}
COMPLETION_UNSUPPORTED = {
    **_COMMON_UNSUPPORTED,
    "suffix": lambda v: v is None or v == "",
}
MESSAGE_UNSUPPORTED = {
    "name": lambda v: v is None,
    "function_call": lambda v: v is None,
    "refusal": lambda v: v is None,
    "audio": lambda v: v is None,
}
WHY = {
    "functions": "the deprecated function calling; send `tools`",
    "function_call": "the deprecated function calling; send `tools` and `tool_choice`",
    "logit_bias": "the engine has no logit bias",
    "suffix": "no insertion (fill-in-the-middle)",
    "prompt_cache_key": "no prompt caching to route by",
    "prompt_cache_retention": "no prompt caching",
    "prompt_cache_options": "no prompt caching",
    "moderation": "no moderation",
}
MAX_N = 16  # choices per request (each is an engine request); OpenAI allows 128
MAX_PROMPTS = 64  # prompts in one /v1/completions request


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM's: usage on every chunk


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's earlier calls
    tool_call_id: str | None = None  # a tool result: the call it answers

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema; absent: no parameters
    strict: bool | None = None  # honoured: the arguments always follow the schema when a call is forced


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JSONSchemaFormat(_Strict):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class ResponseFormatText(_Strict):
    type: Literal["text"]


class ResponseFormatJSONObject(_Strict):
    type: Literal["json_object"]


class ResponseFormatJSONSchema(_Strict):
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


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
    n: int | None = Field(default=None, ge=1, le=MAX_N)
    # vLLM extensions the engine implements.
    top_k: int | None = Field(default=None, ge=-1)
    min_tokens: int | None = Field(default=None, ge=0)
    repetition_penalty: float | None = Field(default=None, gt=0, le=2)
    ignore_eos: bool = False
    # Accepted with their default value only (see *_UNSUPPORTED); typed loosely so that the
    # unsupported check, not a type error, answers.
    logit_bias: Any | None = None
    service_tier: Any | None = None
    store: Any | None = None
    metadata: Any | None = None
    prediction: Any | None = None

    def stop_words(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def choices(self) -> int:
        return self.n or 1


class ChatCompletionRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema | None = Field(
        default=None, discriminator="type"
    )
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    functions: Any | None = None
    function_call: Any | None = None
    modalities: Any | None = None
    audio: Any | None = None
    reasoning_effort: Any | None = None
    web_search_options: Any | None = None
    verbosity: Any | None = None
    prompt_cache_key: Any | None = None
    prompt_cache_retention: Any | None = None
    prompt_cache_options: Any | None = None
    moderation: Any | None = None
    safety_identifier: str | None = None  # accepted, as `user`: it names the end user for the caller's records

    def requested_max_tokens(self) -> tuple[int | None, str]:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"

    @property
    def top_k_logprobs(self) -> int | None:
        """None: no log probs; else how many alternatives per token."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    best_of: int | None = Field(default=None, ge=1, le=MAX_N)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    suffix: Any | None = None

    def requested_max_tokens(self) -> tuple[int | None, str]:
        return self.max_tokens, "max_tokens"

    @property
    def top_k_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def candidates(self) -> int:
        """Generations per prompt (best_of; n of them are returned)."""
        return self.best_of or self.choices

    def prompt_texts(self) -> list[str]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, str) for x in p):
            if len(p) > MAX_PROMPTS:
                raise bad_request("prompt", f"at most {MAX_PROMPTS} prompts per request, got {len(p)}")
            return list(p)
        if not p:
            raise bad_request("prompt", "the prompt list must not be empty")
        raise unsupported("prompt", "token-id prompts; send text")


_BRANCHES = ("str", "list[TextPart]", "list[str]", "list[int]", "list[list[int]]", "TextPart", "NamedToolChoice")
_TAGGED = ("response_format",)  # discriminated unions: pydantic puts the tag after the field's name


def param_of(loc: tuple) -> str:
    """('messages', 0, 'role') -> 'messages[0].role' (pydantic locations may include union branch names)."""
    out = ""
    for n, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _BRANCHES or "[" in str(part) or (n > 0 and loc[n - 1] in _TAGGED):
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
                if m.get("role") == "function":
                    raise unsupported(f"messages[{i}].role", "'function' messages (deprecated); send 'tool' messages")
                for j, part in enumerate(m["content"] if isinstance(m.get("content"), list) else []):
                    if isinstance(part, dict) and part.get("type") != "text":
                        raise unsupported(f"messages[{i}].content[{j}].type", "text parts only (a text model)")
    try:
        req = kind.model_validate(data)
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
    _check_together(req)
    return req


def _check_together(req) -> None:
    """Fields that are valid alone but not together (OpenAI's own rules where it has them)."""
    if isinstance(req, CompletionRequest):
        if req.best_of is not None and req.best_of < req.choices:
            raise bad_request("best_of", f"best_of ({req.best_of}) must not be less than n ({req.choices})")
        if req.best_of and req.best_of > 1 and req.stream:
            raise bad_request("best_of", "best_of cannot be streamed: the best choices are known only at the end")
        if req.echo and req.logprobs is not None:
            raise unsupported("echo", "echo together with logprobs (the prompt's log-probabilities are not computed)")
        return
    if req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs", "logprobs must be true when top_logprobs is set")
    tools = req.tools or []
    if req.tool_choice is not None and req.tool_choice != "none" and not tools:
        raise bad_request("tool_choice", "tool_choice is only allowed when tools are specified")
    names = [t.function.name for t in tools]
    if len(set(names)) != len(names):
        raise bad_request("tools", "tool names must be unique")
    if isinstance(req.tool_choice, NamedToolChoice) and req.tool_choice.function.name not in names:
        raise bad_request("tool_choice", f"tool_choice names '{req.tool_choice.function.name}', which is not in tools")
    if tools and req.tool_choice != "none" and req.response_format is not None and req.response_format.type != "text":
        raise unsupported("response_format", "together with tools (a reply is either a tool call or the format)")
    for i, m in enumerate(req.messages):
        if m.role == "tool" and not m.tool_call_id:
            raise bad_request(f"messages[{i}].tool_call_id", "a 'tool' message needs the tool_call_id it answers")
        if m.role != "tool" and m.tool_call_id is not None:
            raise bad_request(f"messages[{i}].tool_call_id", "only 'tool' messages have a tool_call_id")
        if m.tool_calls and m.role != "assistant":
            raise bad_request(f"messages[{i}].tool_calls", "only 'assistant' messages have tool_calls")
