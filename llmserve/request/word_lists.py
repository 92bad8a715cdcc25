"""TensorRT-LLM's word-list tensor format for stop_words_list / bad_words_list: INT32 [2, L],
row 0 the concatenated token ids of every word, row 1 the cumulative end offsets (padded with -1)."""

from __future__ import annotations

import numpy as np

# One set of limits for both edges (the ensemble's text stop_words / bad_words and tensorrt_llm's
# token-level lists). Stop words become an automaton built once per request (text/stop_words.py):
# its size is the total of their characters, so that total is capped too.
MAX_WORDS = 64  # entries per list
MAX_WORD_CHARS = 256  # characters per text word
MAX_WORD_TOKENS = 256  # token ids per word of a token-level list
MAX_TOTAL_CHARS = 4096  # characters of all stop words of one request together


def to_word_list(words: list[list[int]]) -> np.ndarray:
    """An empty list is [[0], [-1]] rather than a zero-width tensor, which some hops reject."""
    ids = [t for w in words for t in w]
    offsets = np.cumsum([len(w) for w in words]).tolist() if words else []
    width = max(len(ids), 1)
    out = np.zeros((2, width), dtype=np.int32)
    out[1, :] = -1
    out[0, : len(ids)] = ids
    out[1, : len(offsets)] = offsets
    return out


def from_word_list(arr: np.ndarray) -> list[list[int]]:
    """Inverse of to_word_list; raises ValueError on a malformed list (offsets must increase) or
    one beyond the limits above."""
    arr = np.asarray(arr)
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"must have shape [2, L], got {list(arr.shape)}")
    if arr.shape[1] > MAX_WORDS * MAX_WORD_TOKENS:
        raise ValueError(f"at most {MAX_WORDS} words of at most {MAX_WORD_TOKENS} tokens, got {arr.shape[1]} ids")
    ids, offsets = arr[0].tolist(), [o for o in arr[1].tolist() if o >= 0]
    words, start = [], 0
    for end in offsets:
        if end <= start or end > len(ids):
            raise ValueError(f"offset {end} is not increasing or is beyond {len(ids)} ids")
        if end - start > MAX_WORD_TOKENS:
            raise ValueError(f"each word must have at most {MAX_WORD_TOKENS} tokens, got {end - start}")
        words.append(ids[start:end])
        start = end
    if len(words) > MAX_WORDS:
        raise ValueError(f"at most {MAX_WORDS} words, got {len(words)}")
    return words
