import numpy as np
import pytest

from llmserve.request.word_lists import from_word_list, to_word_list


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
