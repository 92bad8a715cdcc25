"""Bad input: a clear error naming the field (HTTP 400 / gRPC INVALID_ARGUMENT); the server stays ready
and other requests are unaffected."""

from __future__ import annotations

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from .client import generate, grpc_inputs

pytestmark = pytest.mark.e2e

CASES = [
    ({"max_tokens": 8}, "text_input"),
    ({"text_input": "", "max_tokens": 8}, "text_input"),
    ({"text_input": "   ", "max_tokens": 8}, "text_input"),
    ({"text_input": "hi", "max_tokens": 0}, "max_tokens"),
    ({"text_input": "hi", "max_tokens": -3}, "max_tokens"),
    ({"text_input": "hi", "max_tokens": 100000}, "max_tokens"),
    ({"text_input": "word " * 2000, "max_tokens": 8}, "text_input"),
    ({"text_input": "hi", "max_tokens": 8, "top_p": 0}, None),  # 0 = unset (TensorRT-LLM convention): accepted
    ({"text_input": "hi", "max_tokens": 8, "top_p": 1.5}, "top_p"),
    ({"text_input": "hi", "max_tokens": 8, "top_p": -0.1}, "top_p"),
    ({"text_input": "hi", "max_tokens": 8, "temperature": -1}, "temperature"),
    ({"text_input": "hi", "max_tokens": 8, "top_k": -1}, "top_k"),
    ({"text_input": "hi", "max_tokens": 8, "min_tokens": 9}, "min_tokens"),
    ({"text_input": "hi", "max_tokens": 8, "beam_width": 4}, "beam_width"),
    ({"text_input": "hi", "max_tokens": 8, "end_id": 10**9}, "end_id"),
]


@pytest.mark.parametrize("body,field", CASES)
def test_http_bad_input_names_the_field(layout_server, body, field):
    r = generate(layout_server, body)
    if field is None:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400, (r.status_code, r.text)
    assert field in r.json()["error"]
    assert requests.get(f"http://{layout_server.http}/v2/health/ready", timeout=10).status_code == 200


def test_wrong_dtype_is_rejected(layout_server):
    r = generate(layout_server, {"text_input": "hi", "max_tokens": "eight"})
    assert 400 <= r.status_code < 600 and r.status_code != 200
    assert "max_tokens" in r.text or "parse" in r.text.lower()
    r = generate(layout_server, {"text_input": "hi", "max_tokens": 8, "stop_words": 5})
    assert r.status_code != 200
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    inputs = grpc_inputs("hi", 8)
    bad = grpcclient.InferInput("stop_words", [1, 1], "INT32")
    bad.set_data_from_numpy(np.array([[5]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="stop_words"):
        client.infer("ensemble_unary", inputs + [bad])


def test_invalid_utf8_over_grpc(layout_server):
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    text = grpcclient.InferInput("text_input", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"\xff\xfe broken \xc3"]], dtype=np.object_))
    n = grpcclient.InferInput("max_tokens", [1, 1], "INT32")
    n.set_data_from_numpy(np.array([[4]], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("ensemble_unary", [text, n])
    assert "text_input" in str(info.value) and "UTF-8" in str(info.value)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_grpc_bad_input_is_invalid_argument(layout_server):
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    with pytest.raises(InferenceServerException) as info:
        client.infer("ensemble_unary", grpc_inputs("hi", 0))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "max_tokens" in str(info.value)


def test_good_requests_unaffected_after_bad_ones(layout_server):
    for body, _ in CASES:
        generate(layout_server, body)
    r = generate(layout_server, {"text_input": "Still there?", "max_tokens": 4})
    assert r.status_code == 200 and r.json()["text_output"]
