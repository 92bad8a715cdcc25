"""request/reader.py: one per-request value (`one`) and the text word lists (`words`), with errors
that name the field."""

import math

import numpy as np
import pytest

from llmserve.errors import RequestError
from llmserve.request.reader import check, one, text, words
from llmserve.request.word_lists import MAX_TOTAL_CHARS, MAX_WORD_CHARS, MAX_WORDS

from .fields import field_error, reader


def test_absent_gives_the_default_or_is_required():
    read = reader()
    assert one(read, "max_tokens", int) is None
    assert one(read, "temperature", float, 0.5) == 0.5
    with pytest.raises(RequestError, match="invalid max_tokens: is required") as e:
        one(read, "max_tokens", int, required=True)
    assert field_error(e) == "max_tokens"


@pytest.mark.parametrize("arr", [np.array([7]), np.array([[7]]), np.array([[[7]]])])
def test_one_value_in_any_shape_of_size_one(arr):
    assert one(reader(max_tokens=arr), "max_tokens", int) == 7


@pytest.mark.parametrize("arr", [np.array([1, 2]), np.array([[1, 2]]), np.zeros((0,), dtype=np.int32)])
def test_more_or_fewer_than_one_value_is_an_error_with_the_shape(arr):
    with pytest.raises(RequestError, match=r"expects one value per request, got shape \[") as e:
        one(reader(max_tokens=arr), "max_tokens", int)
    assert field_error(e) == "max_tokens"


def test_kinds():
    read = reader(s="héllo", b=True, f=np.array([[0.25]], dtype=np.float32), i=np.array([[3]], dtype=np.int64))
    assert one(read, "s", str) == "héllo"
    assert one(read, "b", bool) is True
    assert one(read, "f", float) == 0.25 and isinstance(one(read, "f", float), float)
    assert one(read, "i", int) == 3 and isinstance(one(read, "i", int), int)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_floats_must_be_finite(value):
    with pytest.raises(RequestError, match="must be a finite number") as e:
        one(reader(temperature=value), "temperature", float)
    assert field_error(e) == "temperature"


def test_text_must_be_utf8_and_a_string():
    with pytest.raises(RequestError, match=r"is not valid UTF-8 \(invalid start byte at byte 1\)") as e:
        one(reader(text_input=np.array([[b"a\xff"]], dtype=object)), "text_input", str)
    assert field_error(e) == "text_input"
    with pytest.raises(RequestError, match="must be a string, got int") as e:
        text("text_input", 5)
    assert field_error(e) == "text_input"
    assert text("x", np.bytes_(b"ok")) == "ok" and text("x", "ok") == "ok"


def test_check_names_the_field():
    check("top_p", True, "unused")
    with pytest.raises(RequestError, match=r"^invalid top_p: must be in \(0, 1\]$") as e:
        check("top_p", False, "must be in (0, 1]")
    assert e.value.field == "top_p"


def _words(values):
    return np.array([[v.encode() for v in values]], dtype=object)


def test_words_absent_or_empty_strings_mean_none():
    assert words(reader(), "stop_words") == []
    assert words(reader(stop_words=_words([""])), "stop_words") == []  # the upstream README's "stop_words": ""
    assert words(reader(stop_words=_words(["a", "", "b"])), "stop_words") == ["a", "b"]


def test_words_count_limit_is_inclusive():
    assert len(words(reader(bad_words=_words(["w"] * MAX_WORDS)), "bad_words")) == MAX_WORDS
    with pytest.raises(RequestError, match=f"at most {MAX_WORDS} entries, got {MAX_WORDS + 1}") as e:
        words(reader(bad_words=_words(["w"] * (MAX_WORDS + 1))), "bad_words")
    assert field_error(e) == "bad_words"


def test_a_huge_list_is_refused_before_decoding():
    huge = np.array([[b"\xff"] * (4 * MAX_WORDS + 1)], dtype=object)  # not even valid UTF-8: never decoded
    with pytest.raises(RequestError, match=f"at most {MAX_WORDS} entries, got {4 * MAX_WORDS + 1}"):
        words(reader(stop_words=huge), "stop_words")
    # Up to 4 x the limit, empty strings still count for nothing.
    assert words(reader(stop_words=_words([""] * (4 * MAX_WORDS))), "stop_words") == []


def test_word_length_limit_is_inclusive():
    assert words(reader(stop_words=_words(["x" * MAX_WORD_CHARS])), "stop_words") == ["x" * MAX_WORD_CHARS]
    with pytest.raises(RequestError, match=f"each entry must be at most {MAX_WORD_CHARS} characters") as e:
        words(reader(stop_words=_words(["x" * (MAX_WORD_CHARS + 1)])), "stop_words")
    assert field_error(e) == "stop_words"


def test_total_length_limit_is_inclusive():
    n = MAX_TOTAL_CHARS // MAX_WORD_CHARS
    assert len(words(reader(stop_words=_words(["x" * MAX_WORD_CHARS] * n)), "stop_words")) == n
    too_many = _words(["x" * MAX_WORD_CHARS] * n + ["y"])
    with pytest.raises(RequestError, match=f"at most {MAX_TOTAL_CHARS} characters in all"):
        words(reader(stop_words=too_many), "stop_words")


def test_words_are_utf8_checked_and_named():
    with pytest.raises(RequestError, match="is not valid UTF-8") as e:
        words(reader(bad_words=np.array([[b"ok", b"\xc3"]], dtype=object)), "bad_words")
    assert field_error(e) == "bad_words"
