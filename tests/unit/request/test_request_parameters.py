"""Unknown request parameters are errors naming them (issue 18): on the HTTP generate endpoint every
JSON key that is not an ensemble input arrives as one."""

import json

import pytest

from llmserve.errors import RequestError
from llmserve.request.parameters import client_parameters, refuse_parameters


def test_no_parameters_and_tritons_own_pass():
    refuse_parameters(None)
    refuse_parameters("{}")
    refuse_parameters(json.dumps({"triton_enable_empty_final_response": True, "priority": 1}))
    refuse_parameters({"id": "req-1"})  # the generate endpoint's request id arrives as one too
    assert client_parameters('{"timeout": 5, "x": 1}') == {"x": 1}


@pytest.mark.parametrize(
    "name, words",
    [
        ("random_seed", "send 'seed'"),
        ("min_length", "send 'min_tokens'"),
        ("streaming", "send 'stream'"),
        ("num_return_sequences", "one sequence per request"),
        ("length_penalty", "beam search only"),
        ("return_context_logits", "not supported"),
        ("tempreature", "unknown request field"),
    ],
)
def test_each_is_refused_naming_it(name, words):
    with pytest.raises(RequestError, match=rf"^invalid {name}: .*{words}"):
        refuse_parameters(json.dumps({name: 1}))


def test_several_are_all_named():
    with pytest.raises(RequestError) as e:
        refuse_parameters({"min_length": 1, "random_seed": 2})
    assert str(e.value).startswith("invalid min_length:") and "also: random_seed" in str(e.value)
