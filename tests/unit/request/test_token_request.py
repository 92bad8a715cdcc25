"""request/token_request.py: a token-level (tensorrt_llm contract) request, which clients may send
straight to the engine model: every field checked, its errors naming it, defaults from the model."""

import numpy as np
import pytest

from llmserve.errors import RequestError
from llmserve.request.token_request import is_stop_request, parse_engine_request
from llmserve.request.word_lists import MAX_TOTAL_CHARS, to_word_list

from .fields import field_error, reader

VOCAB, END, MAX_IN, MAX_OUT = 100, (2, 3), 8, 16


def decode(ids: list[int]) -> str:
    """Token i decodes to two characters, token 0 to none (a word that decodes to nothing)."""
    return "".join(f"{i:02d}" for i in ids if i)


def parse(exclude_default=True, **fields):
    fields.setdefault("input_ids", np.array([[5, 6, 7]], dtype=np.int32))
    fields.setdefault("request_output_len", 4)
    return parse_engine_request(
        reader(**fields),
        vocab_size=VOCAB,
        default_end_ids=END,
        max_input_len=MAX_IN,
        max_output_len=MAX_OUT,
        exclude_default=exclude_default,
        decode_word=decode,
    )


def error(**fields) -> tuple[str, str]:
    with pytest.raises(RequestError) as e:
        parse(**fields)
    return field_error(e), str(e.value)


def test_a_minimal_request_and_its_defaults():
    r = parse()
    assert r.prompt == [5, 6, 7]
    p = r.params
    assert p.max_new_tokens == 4 and p.end_ids == END
    assert (p.temperature, p.top_k, p.top_p, p.min_tokens, p.seed) == (0.0, 1, 1.0, 0, None)  # greedy
    assert p.stop_words == [] and p.bad_words == []
    assert (r.streaming, r.exclude_input_in_output, r.return_log_probs) == (False, True, False)
    assert parse(exclude_default=False).exclude_input_in_output is False


def test_flags_and_sampling_are_read():
    r = parse(
        streaming=True,
        exclude_input_in_output=False,
        return_log_probs=True,
        end_id=9,
        runtime_top_k=3,
        runtime_top_p=0.5,
        temperature=0.8,
        seed=7,
        min_tokens=4,
    )
    assert (r.streaming, r.exclude_input_in_output, r.return_log_probs) == (True, False, True)
    assert r.params.end_ids == (9,)
    assert (r.params.top_k, r.params.top_p, r.params.temperature, r.params.seed, r.params.min_tokens) == (
        3,
        0.5,
        pytest.approx(0.8),
        7,
        4,
    )


def test_input_ids_are_required_and_one_sequence():
    with pytest.raises(RequestError, match="invalid input_ids: is required"):
        parse_engine_request(
            reader(request_output_len=4),
            vocab_size=VOCAB,
            default_end_ids=END,
            max_input_len=MAX_IN,
            max_output_len=MAX_OUT,
            exclude_default=True,
            decode_word=decode,
        )
    field, message = error(input_ids=np.array([[1, 2], [3, 4]], dtype=np.int32))
    assert field == "input_ids" and "batch size 2: send one sequence per request" in message
    assert parse(input_ids=np.array([5, 6], dtype=np.int32)).prompt == [5, 6]  # shape [L] is one sequence too


def test_input_lengths_cut_the_prompt_within_bounds():
    assert parse(input_lengths=2).prompt == [5, 6]
    assert parse(input_lengths=3).prompt == [5, 6, 7]
    for bad in (0, 4):
        field, message = error(input_lengths=bad)
        assert field == "input_lengths" and "must be in [1, 3] (the number of input_ids)" in message


def test_prompt_length_limit_is_inclusive():
    assert len(parse(input_ids=np.ones((1, MAX_IN), np.int32)).prompt) == MAX_IN
    field, message = error(input_ids=np.ones((1, MAX_IN + 1), np.int32))
    assert field == "input_lengths" and f"prompt has {MAX_IN + 1} tokens, the limit is {MAX_IN}" in message


@pytest.mark.parametrize("bad", [-1, VOCAB])
def test_token_ids_lie_in_the_vocabulary(bad):
    assert parse(input_ids=np.array([[0, VOCAB - 1]], np.int32)).prompt == [0, VOCAB - 1]
    field, message = error(input_ids=np.array([[5, bad]], np.int32))
    assert field == "input_ids" and f"token ids must lie in [0, {VOCAB})" in message


def test_ids_past_input_lengths_are_not_checked():
    assert parse(input_ids=np.array([[5, VOCAB + 7]], np.int32), input_lengths=1).prompt == [5]


def test_request_output_len_is_required_and_bounded():
    with pytest.raises(RequestError, match="invalid request_output_len: is required"):
        parse_engine_request(
            reader(input_ids=np.array([[5]], np.int32)),
            vocab_size=VOCAB,
            default_end_ids=END,
            max_input_len=MAX_IN,
            max_output_len=MAX_OUT,
            exclude_default=True,
            decode_word=decode,
        )
    assert parse(request_output_len=1).params.max_new_tokens == 1
    assert parse(request_output_len=MAX_OUT).params.max_new_tokens == MAX_OUT
    for bad in (0, MAX_OUT + 1):
        field, message = error(request_output_len=bad)
        assert field == "request_output_len" and f"must be in [1, {MAX_OUT}], got {bad}" in message


@pytest.mark.parametrize("bad", [-1, VOCAB])
def test_end_id_lies_in_the_vocabulary(bad):
    assert parse(end_id=0).params.end_ids == (0,) and parse(end_id=VOCAB - 1).params.end_ids == (VOCAB - 1,)
    field, message = error(end_id=bad)
    assert field == "end_id" and f"must lie in [0, {VOCAB}), got {bad}" in message


def test_sampling_errors_use_the_token_level_names():
    assert error(runtime_top_k=-1)[0] == "runtime_top_k"
    assert error(runtime_top_p=1.5)[0] == "runtime_top_p"
    field, message = error(min_tokens=5)  # above request_output_len
    assert field == "min_tokens" and "max_tokens=4" in message


def test_stop_words_are_token_sequences_by_default():
    """Upstream's way: each word's ids, matched against the end of the generated tokens."""
    words = to_word_list([[11, 12], [13]])[None]  # [1, 2, L], as the ensemble sends it
    for r in (parse(stop_words_list=words), parse(stop_words_list=words, stop_words_match="tokens")):
        assert r.params.stop_sequences == [[11, 12], [13]] and r.params.stop_words == []


def test_stop_words_as_text_are_decoded_and_empty_ones_dropped():
    r = parse(stop_words_list=to_word_list([[11, 12], [0], [13]])[None], stop_words_match="text")
    assert r.params.stop_words == ["1112", "13"] and r.params.stop_sequences == []


def test_stop_words_match_must_be_tokens_or_text():
    field, message = error(stop_words_match="substring")
    assert field == "stop_words_match" and "'tokens', 'text'" in message and "'substring'" in message


def test_bad_words_stay_token_ids():
    assert parse(bad_words_list=to_word_list([[11], [12, 13]])).params.bad_words == [[11], [12, 13]]


@pytest.mark.parametrize("name", ["stop_words_list", "bad_words_list"])
def test_word_list_errors_name_the_list(name):
    field, message = error(**{name: np.array([[1, 2], [2, 1]], np.int32)})  # offsets go back
    assert field == name and "not increasing" in message
    field, message = error(**{name: np.zeros((3, 2), np.int32)})
    assert field == name and "must have shape [2, L]" in message
    field, message = error(**{name: to_word_list([[1], [VOCAB]])})
    assert field == name and f"token ids must lie in [0, {VOCAB})" in message


def test_stop_words_decoded_length_is_capped():
    per_word = 64  # tokens of 2 characters each: 128 characters a word
    n = MAX_TOTAL_CHARS // (2 * per_word)
    ok = to_word_list([[7] * per_word] * n)
    assert sum(map(len, parse(stop_words_list=ok, stop_words_match="text").params.stop_words)) == MAX_TOTAL_CHARS
    field, message = error(stop_words_list=to_word_list([[7] * per_word] * n + [[7]]), stop_words_match="text")
    assert field == "stop_words_list" and f"more than {MAX_TOTAL_CHARS} characters" in message


def test_stop_request():
    assert is_stop_request(reader()) is False
    assert is_stop_request(reader(stop=False)) is False
    assert is_stop_request(reader(stop=True)) is True
    with pytest.raises(RequestError, match="invalid stop: expects one value per request"):
        is_stop_request(reader(stop=np.array([True, True])))


def test_echo_ids_stand_for_the_prompt_in_the_output():
    assert parse().echo is None
    assert parse(echo_ids=np.array([[9, 8]], dtype=np.int32)).echo == [9, 8]
    field, message = error(echo_ids=np.array([[VOCAB]], dtype=np.int32))
    assert field == "echo_ids" and f"[0, {VOCAB})" in message
    field, message = error(echo_ids=np.ones((1, MAX_IN + 1), dtype=np.int32))
    assert field == "echo_ids" and f"the limit is {MAX_IN}" in message
