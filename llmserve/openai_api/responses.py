"""OpenAI's response and stream-chunk objects, and their SSE framing."""

from __future__ import annotations

import json

CHAT, COMPLETION = "chat.completion", "text_completion"


def dumps(obj) -> bytes:
    # Text as UTF-8, not \\u escapes: smaller, and what OpenAI's servers send.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sse(obj) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class Shape:
    """Builds the objects of one response (chat or completion) with its id, time and model."""

    def __init__(self, kind: str, request_id: str, created: int, model: str):
        self.kind, self.id, self.created, self.model = kind, request_id, created, model

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, choices: list[dict], use: dict) -> dict:
        """choices: chat {index, message, logprobs, finish_reason}; completion {index, text, logprobs,
        finish_reason}; in index order."""
        return {**self._head(self.kind), "choices": choices, "usage": use}

    def chat_chunk(
        self, index: int, delta: dict, logprobs: list | None, finish_reason: str | None, with_usage: bool
    ) -> dict:
        """One streamed chat chunk. with_usage: `"usage": null` on every chunk, as OpenAI does with
        include_usage."""
        lp = {"content": logprobs, "refusal": None} if logprobs is not None else None
        choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish_reason}
        obj = {**self._head("chat.completion.chunk"), "choices": [choice]}
        if with_usage:
            obj["usage"] = None
        return obj

    def text_chunk(
        self, index: int, text: str, logprobs: dict | None, finish_reason: str | None, with_usage: bool
    ) -> dict:
        choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        obj = {**self._head(COMPLETION), "choices": [choice]}
        if with_usage:
            obj["usage"] = None
        return obj

    def usage_chunk(self, use: dict) -> dict:
        obj = "chat.completion.chunk" if self.kind == CHAT else COMPLETION
        return {**self._head(obj), "choices": [], "usage": use}
