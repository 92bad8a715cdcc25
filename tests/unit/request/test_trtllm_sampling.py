"""Sampling knobs mean what they mean to TensorRT-LLM (issue 18): absent top_k / top_p are its
defaults (0, 0), and top_k == 0 and top_p == 0 is greedy, so temperature alone does not sample."""

import numpy as np
import pytest

from llmserve.engine.sampling import SamplingParams, trtllm_top_k_top_p
from llmserve.errors import RequestError
from llmserve.request.sampling import CLIENT_NAMES, ENGINE_NAMES, read_sampling


def _reader(**values):
    arrays = {k: np.array([[v]], dtype=np.int32 if isinstance(v, int) else np.float32) for k, v in values.items()}
    return arrays.get


@pytest.mark.parametrize(
    "k, p, expected",
    [
        (0, 0.0, (1, 1.0)),  # greedy: the layers' setup sets k = 1
        (5, 0.0, (5, 1.0)),  # top-k alone
        (0, 0.9, (0, 0.9)),  # top-p alone
        (5, 0.9, (5, 0.9)),
    ],
)
def test_trtllm_rule(k, p, expected):
    assert trtllm_top_k_top_p(k, p) == expected


@pytest.mark.parametrize("names", [CLIENT_NAMES, ENGINE_NAMES])
def test_temperature_alone_is_greedy(names):
    s = read_sampling(_reader(temperature=1.0), names, max_tokens=8)
    assert SamplingParams(max_new_tokens=8, **s).greedy


@pytest.mark.parametrize("names", [CLIENT_NAMES, ENGINE_NAMES])
def test_zero_top_k_and_top_p_are_greedy(names):
    s = read_sampling(_reader(temperature=0.7, **{names["top_k"]: 0, names["top_p"]: 0.0}), names, max_tokens=8)
    assert SamplingParams(max_new_tokens=8, **s).greedy


def test_a_top_p_or_a_top_k_samples():
    s = read_sampling(_reader(temperature=1.0, top_p=1.0), CLIENT_NAMES, max_tokens=8)
    assert not SamplingParams(max_new_tokens=8, **s).greedy and s["top_p"] == 1.0 and s["top_k"] == 0
    s = read_sampling(_reader(temperature=1.0, top_k=40), CLIENT_NAMES, max_tokens=8)
    assert not SamplingParams(max_new_tokens=8, **s).greedy and (s["top_k"], s["top_p"]) == (40, 1.0)


def test_top_p_outside_zero_one_is_refused():
    with pytest.raises(RequestError, match="top_p"):
        read_sampling(_reader(top_p=1.5), CLIENT_NAMES, max_tokens=8)
