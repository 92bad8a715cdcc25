"""Reading request tensors into typed Python values, with errors that name the field.

The adapters pass a `read(name) -> numpy array | None` function, so this module never sees Triton."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..contract import STOP_MATCH_TEXT, STOP_MATCH_TOKENS, STOP_WORDS_MATCH
from ..errors import RequestError
from .word_lists import MAX_TOTAL_CHARS, MAX_WORD_CHARS, MAX_WORDS

Reader = Callable[[str], "np.ndarray | None"]


def one(read: Reader, name: str, kind: type, default=None, *, required: bool = False):
    """A per-request scalar (sent as shape [1] or [1, 1]); None/default when absent."""
    arr = read(name)
    if arr is None:
        if required:
            raise RequestError(name, "is required")
        return default
    if arr.size != 1:
        raise RequestError(name, f"expects one value per request, got shape {list(arr.shape)}")
    value = arr.reshape(-1)[0]
    if kind is str:
        return text(name, value)
    if kind is bool:
        return bool(value)
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise RequestError(name, f"must be a finite number, got {value}")
        return value
    return int(value)


def text(name: str, value) -> str:
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(name, f"is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if isinstance(value, str):
        return value
    raise RequestError(name, f"must be a string, got {type(value).__name__}")


def words(read: Reader, name: str) -> list[str]:
    """A list of strings (stop_words / bad_words). Empty strings are ignored, so the upstream
    README form `"stop_words": ""` means "none". Limits: request/word_lists.py."""
    arr = read(name)
    if arr is None:
        return []
    if arr.size > 4 * MAX_WORDS:  # do not even decode a huge list
        raise RequestError(name, f"at most {MAX_WORDS} entries, got {arr.size}")
    values = [text(name, v) for v in arr.reshape(-1).tolist()]
    values = [v for v in values if v]
    if len(values) > MAX_WORDS:
        raise RequestError(name, f"at most {MAX_WORDS} entries, got {len(values)}")
    if any(len(v) > MAX_WORD_CHARS for v in values):
        raise RequestError(name, f"each entry must be at most {MAX_WORD_CHARS} characters")
    if sum(map(len, values)) > MAX_TOTAL_CHARS:
        raise RequestError(name, f"at most {MAX_TOTAL_CHARS} characters in all")
    return values


def stop_words_match(read: Reader) -> str:
    """How stop words match (contract.STOP_WORDS_MATCH): "tokens" (upstream's, the default) or "text"."""
    mode = one(read, STOP_WORDS_MATCH, str, STOP_MATCH_TOKENS)
    modes = (STOP_MATCH_TOKENS, STOP_MATCH_TEXT)
    check(STOP_WORDS_MATCH, mode in modes, f"must be one of {', '.join(map(repr, modes))}, got {mode!r}")
    return mode


def check(name: str, ok: bool, problem: str) -> None:
    if not ok:
        raise RequestError(name, problem)
