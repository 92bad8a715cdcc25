"""request/word_lists.py: TensorRT-LLM's [2, L] word-list tensors, both ways, and their limits."""

import numpy as np
import pytest

from llmserve.request.word_lists import MAX_WORD_TOKENS, MAX_WORDS, from_word_list, to_word_list


def test_round_trip_and_empty():
    words = [[1, 2], [3], [4, 5, 6]]
    arr = to_word_list(words)
    assert arr.dtype == np.int32 and arr.shape == (2, 6)
    assert arr[1].tolist() == [2, 3, 6, -1, -1, -1]
    assert from_word_list(arr) == words
    assert from_word_list(to_word_list([])) == []


@pytest.mark.parametrize("bad", [np.zeros((3, 2)), np.array([[1, 2], [2, 1]]), np.array([[1], [5]])])
def test_malformed_lists_are_errors(bad):
    with pytest.raises(ValueError):
        from_word_list(bad)


def test_the_ensembles_batch_dimension_is_accepted():
    assert from_word_list(to_word_list([[1], [2, 3]])[None]) == [[1], [2, 3]]


def test_word_count_limit_is_inclusive():
    assert len(from_word_list(to_word_list([[1]] * MAX_WORDS))) == MAX_WORDS
    with pytest.raises(ValueError, match=f"at most {MAX_WORDS} words, got {MAX_WORDS + 1}"):
        from_word_list(to_word_list([[1]] * (MAX_WORDS + 1)))


def test_word_length_limit_is_inclusive():
    assert from_word_list(to_word_list([[1] * MAX_WORD_TOKENS])) == [[1] * MAX_WORD_TOKENS]
    with pytest.raises(ValueError, match=f"each word must have at most {MAX_WORD_TOKENS} tokens"):
        from_word_list(to_word_list([[1] * (MAX_WORD_TOKENS + 1)]))


def test_a_too_wide_tensor_is_refused_before_it_is_read():
    with pytest.raises(ValueError, match=f"at most {MAX_WORDS} words of at most {MAX_WORD_TOKENS} tokens"):
        from_word_list(np.zeros((2, MAX_WORDS * MAX_WORD_TOKENS + 1), np.int32))


def test_offsets_beyond_the_ids_and_padding():
    with pytest.raises(ValueError, match="beyond 2 ids"):
        from_word_list(np.array([[1, 2], [3, -1]]))
    assert from_word_list(np.array([[1, 2, 0], [2, -1, -1]])) == [[1, 2]]  # padding after the last offset
