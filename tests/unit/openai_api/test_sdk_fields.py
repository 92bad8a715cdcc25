"""Nothing the openai SDK can send is silently ignored: every parameter of its chat.completions.create
and completions.create is a field of our request models, and each is honoured (README's list) or in the
tables of values we refuse by name."""

from __future__ import annotations

import inspect

from openai.resources.chat.completions import Completions as Chat
from openai.resources.completions import Completions

from llmserve.openai_api import protocol as P

SDK_ONLY = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}  # the SDK's own, not sent
HONOURED_CHAT = {
    "messages", "model", "max_tokens", "max_completion_tokens", "stop", "temperature", "top_p", "seed",
    "presence_penalty", "frequency_penalty", "stream", "stream_options", "user", "safety_identifier", "n",
    "logprobs", "top_logprobs", "response_format", "tools", "tool_choice", "parallel_tool_calls",
}  # fmt: skip
HONOURED_COMPLETION = {
    "prompt", "model", "max_tokens", "stop", "temperature", "top_p", "seed", "presence_penalty",
    "frequency_penalty", "stream", "stream_options", "user", "n", "best_of", "echo", "logprobs",
}  # fmt: skip


def sdk_params(create) -> set[str]:
    return set(inspect.signature(create).parameters) - SDK_ONLY


def test_every_chat_parameter_is_honoured_or_refused_by_name():
    sent = sdk_params(Chat.create)
    assert sent <= set(P.ChatCompletionRequest.model_fields), sent - set(P.ChatCompletionRequest.model_fields)
    assert sent <= HONOURED_CHAT | set(P.CHAT_UNSUPPORTED), sent - HONOURED_CHAT - set(P.CHAT_UNSUPPORTED)


def test_every_completion_parameter_is_honoured_or_refused_by_name():
    sent = sdk_params(Completions.create)
    assert sent <= set(P.CompletionRequest.model_fields), sent - set(P.CompletionRequest.model_fields)
    assert sent <= HONOURED_COMPLETION | set(P.COMPLETION_UNSUPPORTED)
