"""request/sampling.py: the sampling knobs, their defaults and ranges, under the ensemble's names
(top_k, top_p) and the token-level model's (runtime_top_k, runtime_top_p)."""

import pytest

from llmserve.errors import RequestError
from llmserve.request.sampling import CLIENT_NAMES, ENGINE_NAMES, read_sampling

from .fields import field_error, reader

# top_k 1: nothing sent is TensorRT-LLM's top_k == 0 and top_p == 0, which is greedy (test_trtllm_sampling.py).
DEFAULTS = dict(
    temperature=0.0,
    top_k=1,
    top_p=1.0,
    repetition_penalty=1.0,
    presence_penalty=0.0,
    frequency_penalty=0.0,
    min_tokens=0,
    seed=None,
)


@pytest.mark.parametrize("names", [CLIENT_NAMES, ENGINE_NAMES])
def test_defaults_when_nothing_is_sent(names):
    assert read_sampling(reader(), names, max_tokens=16) == DEFAULTS


def test_values_are_read_under_each_edges_names():
    sent = dict(
        temperature=0.7, repetition_penalty=1.2, presence_penalty=-2.0, frequency_penalty=2.0, min_tokens=16, seed=1234
    )
    client = read_sampling(reader(top_k=5, top_p=0.9, **sent), CLIENT_NAMES, max_tokens=16)
    engine = read_sampling(reader(runtime_top_k=5, runtime_top_p=0.9, **sent), ENGINE_NAMES, max_tokens=16)
    assert client == engine == {**sent, "top_k": 5, "top_p": pytest.approx(0.9)}
    # Each edge reads only its own names: the other's are ignored.
    assert read_sampling(reader(runtime_top_k=5), CLIENT_NAMES, max_tokens=16)["top_k"] == 1  # absent: greedy


def _error(names=CLIENT_NAMES, max_tokens=16, max_beam_width=1, **fields) -> tuple[str, str]:
    with pytest.raises(RequestError) as e:
        read_sampling(reader(**fields), names, max_tokens, max_beam_width)
    return field_error(e), str(e.value)


@pytest.mark.parametrize(
    "fields, field, says",
    [
        ({"temperature": -0.1}, "temperature", "must be >= 0"),
        ({"temperature": 1e-6}, "temperature", "must be 0 (greedy) or >= 1e-05"),
        ({"top_k": -1}, "top_k", "must be >= 0 (0 disables top-k), got -1"),
        ({"top_p": 1.01}, "top_p", "must be in [0, 1]"),
        ({"top_p": -0.5}, "top_p", "must be in [0, 1]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty", "must be > 0"),
        ({"presence_penalty": -2.01}, "presence_penalty", "must be in [-2, 2]"),
        ({"frequency_penalty": 2.01}, "frequency_penalty", "must be in [-2, 2]"),
        ({"min_tokens": -1}, "min_tokens", "must be in [0, max_tokens=16], got -1"),
        ({"min_tokens": 17}, "min_tokens", "must be in [0, max_tokens=16], got 17"),
        ({"beam_width": 0}, "beam_width", "must be in [1, 1] for this engine, got 0"),
        ({"beam_width": 2}, "beam_width", "must be in [1, 1] for this engine, got 2"),
    ],
)
def test_out_of_range_names_the_field(fields, field, says):
    got, message = _error(**fields)
    assert got == field and says in message, message


def test_the_token_level_model_names_its_own_fields():
    assert _error(ENGINE_NAMES, runtime_top_k=-1)[0] == "runtime_top_k"
    assert _error(ENGINE_NAMES, runtime_top_p=2.0)[0] == "runtime_top_p"


@pytest.mark.parametrize(
    "fields",
    [
        {"temperature": 0.0},
        {"temperature": 1e-5},
        {"top_k": 0},
        {"top_p": 1.0},
        {"top_p": 1e-6},
        {"repetition_penalty": 1e-6},
        {"presence_penalty": -2.0},
        {"presence_penalty": 2.0},
        {"frequency_penalty": -2.0},
        {"frequency_penalty": 2.0},
        {"min_tokens": 0},
        {"min_tokens": 16},
        {"beam_width": 1},
    ],
)
def test_boundaries_are_accepted(fields):
    got = read_sampling(reader(**fields), CLIENT_NAMES, max_tokens=16)
    ((name, value),) = fields.items()
    if name != "beam_width":  # checked only; the engine has one beam
        expected = 1 if (name, value) == ("top_k", 0) else value  # top_k 0 without top_p: greedy, k = 1
        assert got[name] == pytest.approx(expected)


def test_top_p_zero_is_tensorrt_llms_unset():
    assert read_sampling(reader(top_p=0.0), CLIENT_NAMES, max_tokens=16)["top_p"] == 1.0


def test_beam_width_up_to_what_the_engine_has():
    read_sampling(reader(beam_width=4), CLIENT_NAMES, 16, max_beam_width=4)
    assert _error(max_beam_width=4, beam_width=5)[0] == "beam_width"


def test_non_finite_floats_are_refused_by_name():
    assert _error(temperature=float("nan"))[0] == "temperature"
    assert _error(top_p=float("inf"))[0] == "top_p"
