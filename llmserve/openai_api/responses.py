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

    def whole(self, text: str, finish_reason: str, use: dict) -> dict:
        if self.kind == CHAT:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head(self.kind), "choices": [choice], "usage": use}

    def chunk(
        self, text: str | None, finish_reason: str | None = None, *, first: bool = False, with_usage: bool = False
    ) -> dict:
        """One streamed chunk. Chat: the first carries the role, the last an empty delta and the
        finish reason. with_usage: `"usage": null` on every chunk, as OpenAI does with include_usage."""
        if self.kind == CHAT:
            delta: dict = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            obj = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
            obj = {**self._head(COMPLETION), "choices": [choice]}
        if with_usage:
            obj["usage"] = None
        return obj

    def usage_chunk(self, use: dict) -> dict:
        obj = "chat.completion.chunk" if self.kind == CHAT else COMPLETION
        return {**self._head(obj), "choices": [], "usage": use}
