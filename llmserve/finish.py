"""Why a generation ended: one enum shared by the engine, the Triton adapters and the clients,
instead of strings matched by prefix."""

from __future__ import annotations

from enum import Enum


class FinishReason(str, Enum):
    STOP = "stop"  # the end token (it is not part of the output)
    STOP_WORD = "stop_word"  # a stop word appeared (on text: the output ends before it; as tokens: with it)
    LENGTH = "length"  # max_tokens reached
    CANCELLED = "cancelled"  # the client went away or cancelled
    TIMEOUT = "timeout"  # serving.request_timeout_s passed
    ERROR = "error"  # the engine failed this request (the message says why)

    @property
    def completed(self) -> bool:
        """The request got its whole answer (as opposed to being cut short)."""
        return self in (FinishReason.STOP, FinishReason.STOP_WORD, FinishReason.LENGTH)
