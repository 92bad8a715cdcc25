"""The real default model behind the committed model_repository/: a real answer, exact streaming."""

import pytest

from llmserve.spec import ROOT
from llmserve.text.tokenizer import load_fast

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
    body = {
        "text_input": "What is the capital of France?",
        "max_tokens": 32,
        "stop_words": ["Paris"],
        "stop_words_match": "text",  # " Paris" in context is not the tokens of "Paris" alone
    }
    text = generate(smollm2_server, body).json()["text_output"]
    assert "Paris" not in text and text.startswith("The capital of France is")


def test_upstream_llama_md_stop_words_body(smollm2_server):
    """TensorRT-LLM's docs/llama.md body with bad and stop words. Upstream matches each stop word's ids
    (tokenized alone) as a token sequence: "learn" alone is not the " learning" the model writes, so the
    answer goes on (matched on the text it stopped at "Machine"); a stop, if any, ends the output with
    the word's tokens."""
    body = {
        "text_input": "What is machine learning?",
        "max_tokens": 20,
        "bad_words": ["intelligence", "model"],
        "stop_words": ["focuses", "learn"],
        "pad_id": 2,
        "end_id": 2,
    }
    r = generate(smollm2_server, body)
    assert r.status_code == 200, r.text
    text, ids = r.json()["text_output"], r.json()["output_token_ids"]
    assert text.startswith("Machine learning"), text
    tok = load_fast(ROOT / "build/checkpoints/smollm2-135m-instruct")
    words = [tok.encode(w, add_special_tokens=False).ids for w in body["stop_words"]]
    assert len(ids) == 20 or any(ids[-len(w) :] == w for w in words), (text, ids)
    as_text = generate(smollm2_server, {**body, "stop_words_match": "text"}).json()["text_output"]
    assert "learn" not in as_text and text.startswith(as_text), as_text
