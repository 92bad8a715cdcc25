"""The real default model behind the committed model_repository/: a real answer, exact streaming."""

import pytest

from .client import generate, generate_stream, grpc_stream

pytestmark = [pytest.mark.e2e, pytest.mark.smollm2]


def test_capital_of_france(smollm2_server):
    r = generate(smollm2_server, {"text_input": "What is the capital of France?", "max_tokens": 32})
    assert r.status_code == 200, r.text
    assert "Paris" in r.json()["text_output"]


def test_chinese_stream_equals_whole_text(smollm2_server):
    body = {"text_input": "请用中文介绍一下北京，并加上一个表情符号。", "max_tokens": 48}
    whole = generate(smollm2_server, body).json()["text_output"]
    assert any("\u4e00" <= c <= "\u9fff" for c in whole), whole
    assert "".join(e["text_output"] for e in generate_stream(smollm2_server, body)) == whole
    assert "".join(grpc_stream(smollm2_server, body["text_input"], 48)) == whole


def test_stop_word_on_a_real_answer(smollm2_server):
    body = {"text_input": "What is the capital of France?", "max_tokens": 32, "stop_words": ["Paris"]}
    text = generate(smollm2_server, body).json()["text_output"]
    assert "Paris" not in text and text.startswith("The capital of France is")
