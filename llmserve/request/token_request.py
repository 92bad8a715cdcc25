"""A token-level (tensorrt_llm contract) request, validated into what the engine needs. This model
is an edge too: the common tutorial client sends input_ids / input_lengths / request_output_len to
it directly, so it checks its own inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..contract import ECHO_IDS, MAX_TOP_LOG_PROBS, STOP_MATCH_TEXT, TOP_LOG_PROBS
from ..engine.params import SamplingParams
from ..errors import RequestError
from .guided import GUIDE, Guide, read_guide
from .reader import Reader, check, one, stop_words_match
from .sampling import ENGINE_NAMES, read_sampling
from .word_lists import MAX_TOTAL_CHARS, from_word_list


@dataclass
class EngineRequest:
    prompt: list[int]
    params: SamplingParams
    streaming: bool
    exclude_input_in_output: bool
    return_log_probs: bool
    guide: Guide | None = None  # compiled into params.grammar by the engine that serves it
    echo: list[int] | None = None  # what stands for the prompt in the output (None: the prompt itself)


def is_stop_request(read: Reader) -> bool:
    """Upstream's `stop` input: cancel the request with this request's id (its other inputs are
    ignored). Checked before anything else is parsed."""
    return bool(one(read, "stop", bool, False))


def _word_list(read: Reader, name: str) -> list[list[int]]:
    arr = read(name)
    if arr is None:
        return []
    try:
        return from_word_list(arr)
    except ValueError as e:
        raise RequestError(name, str(e)) from None


def parse_engine_request(
    read: Reader,
    *,
    vocab_size: int,
    default_end_ids: tuple[int, ...],
    max_input_len: int,
    max_output_len: int,
    exclude_default: bool,
    decode_word,
) -> EngineRequest:
    ids = read("input_ids")
    if ids is None:
        raise RequestError("input_ids", "is required")
    if ids.ndim == 2 and ids.shape[0] != 1:
        raise RequestError("input_ids", f"batch size {ids.shape[0]}: send one sequence per request")
    ids = ids.reshape(-1)
    length = one(read, "input_lengths", int, len(ids))
    check(
        "input_lengths", 1 <= length <= len(ids), f"must be in [1, {len(ids)}] (the number of input_ids), got {length}"
    )
    check("input_lengths", length <= max_input_len, f"prompt has {length} tokens, the limit is {max_input_len}")
    prompt = ids[:length].astype(np.int64)
    check("input_ids", bool(((prompt >= 0) & (prompt < vocab_size)).all()), f"token ids must lie in [0, {vocab_size})")
    decoder = read("decoder_input_ids")
    # Upstream's preprocessing answers one pad token for a decoder-only model (its end_to_end_test.py
    # sends it back): that means no decoder input. Anything longer is an encoder-decoder request.
    check(
        "decoder_input_ids",
        decoder is None or decoder.size <= 1,
        "encoder-decoder models are not served (send at most the one pad token upstream's preprocessing gives)",
    )
    max_tokens = one(read, "request_output_len", int, required=True)
    check(
        "request_output_len", 1 <= max_tokens <= max_output_len, f"must be in [1, {max_output_len}], got {max_tokens}"
    )
    end_id = one(read, "end_id", int, None)
    if end_id is not None:
        check("end_id", 0 <= end_id < vocab_size, f"must lie in [0, {vocab_size}), got {end_id}")
    sampling = read_sampling(read, ENGINE_NAMES, max_tokens)
    guide = read_guide(read)
    check_guided_min_tokens(guide, sampling["min_tokens"])
    stop_ids = _word_list(read, "stop_words_list")
    bad_words = _word_list(read, "bad_words_list")
    for name, lists in (("stop_words_list", stop_ids), ("bad_words_list", bad_words)):
        for w in lists:
            check(name, all(0 <= t < vocab_size for t in w), f"token ids must lie in [0, {vocab_size})")
    # Upstream's way by default: each word's ids against the end of the generated tokens. As text
    # (stop_words_match "text"): each word's ids decoded and matched on the generated text.
    as_text = stop_words_match(read) == STOP_MATCH_TEXT
    stop_words = [decode_word(w) for w in stop_ids] if as_text else []
    check(
        "stop_words_list",
        sum(map(len, stop_words)) <= MAX_TOTAL_CHARS,
        f"the stop words decode to more than {MAX_TOTAL_CHARS} characters in all",
    )
    params = SamplingParams(
        max_new_tokens=max_tokens,
        end_ids=(end_id,) if end_id is not None else default_end_ids,
        stop_words=[w for w in stop_words if w],
        stop_sequences=[] if as_text else stop_ids,
        bad_words=bad_words,
        top_logprobs=read_top_log_probs(read),
        **sampling,
    )
    echo = read(ECHO_IDS)
    if echo is not None:
        if echo.ndim == 2 and echo.shape[0] != 1:
            raise RequestError(ECHO_IDS, f"batch size {echo.shape[0]}: send one sequence per request")
        echo = echo.reshape(-1).astype(np.int64)
        check(ECHO_IDS, echo.size <= max_input_len, f"has {echo.size} tokens, the limit is {max_input_len}")
        check(ECHO_IDS, bool(((echo >= 0) & (echo < vocab_size)).all()), f"token ids must lie in [0, {vocab_size})")
    return EngineRequest(
        prompt=prompt.tolist(),
        params=params,
        streaming=one(read, "streaming", bool, False),
        exclude_input_in_output=one(read, "exclude_input_in_output", bool, exclude_default),
        return_log_probs=one(read, "return_log_probs", bool, False),
        guide=guide,
        echo=echo.tolist() if echo is not None else None,
    )


def read_top_log_probs(read: Reader) -> int:
    """Ours (contract.TOP_LOG_PROBS): how many alternatives to report per generated token."""
    k = one(read, TOP_LOG_PROBS, int, 0)
    check(TOP_LOG_PROBS, 0 <= k <= MAX_TOP_LOG_PROBS, f"must be in [0, {MAX_TOP_LOG_PROBS}], got {k}")
    return k


def check_guided_min_tokens(guide: Guide | None, min_tokens: int) -> None:
    """With a guide the grammar decides where the output ends (the end token is allowed exactly when it
    is complete); min_tokens could forbid the only token the grammar allows, so the two are exclusive."""
    check(
        "min_tokens",
        guide is None or min_tokens == 0,
        f"cannot be combined with {GUIDE}: the grammar decides where the output ends",
    )
