"""The ensemble end to end on a real tritonserver with the tiny random model (fast)."""

from __future__ import annotations

import concurrent.futures as cf
import re

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .client import generate, generate_stream, grpc_inputs, grpc_stream

pytestmark = pytest.mark.e2e

UNICODE_PROMPT = "Écris en chinois et avec des emoji: 你好，世界 🎉👩‍👩‍👧"


def test_generate_returns_text_output(layout_server):
    r = generate(layout_server, {"text_input": "Hello there", "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["text_output"], str) and r.json()["text_output"]


def test_upstream_readme_form(layout_server):
    r = generate(
        layout_server, {"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", "stop_words": ""}
    )
    assert r.status_code == 200, r.text
    assert "text_output" in r.json()


def test_http_stream_concatenates_to_unary_text_byte_for_byte(layout_server):
    for prompt in (UNICODE_PROMPT, "Tell me a story about a dragon.", "日本語で答えてください。"):
        body = {"text_input": prompt, "max_tokens": 48}
        whole = generate(layout_server, body).json()["text_output"]
        events = generate_stream(layout_server, body)
        assert len(events) > 1, "streaming must return text incrementally"
        assert "".join(e["text_output"] for e in events).encode() == whole.encode()


def test_grpc_stream_concatenates_to_unary_text(layout_server):
    whole = generate(layout_server, {"text_input": UNICODE_PROMPT, "max_tokens": 40}).json()["text_output"]
    pieces = grpc_stream(layout_server, UNICODE_PROMPT, 40)
    assert len(pieces) > 1
    assert "".join(pieces).encode() == whole.encode()


def test_stream_with_non_ascii_output(layout_server):
    """A random model emits arbitrary byte tokens: the stream must never show a broken character
    that the whole text does not have."""
    body = {"text_input": "随机", "max_tokens": 64, "temperature": 1.0, "top_p": 1.0, "seed": 7}
    whole = generate(layout_server, body).json()["text_output"]
    streamed = "".join(e["text_output"] for e in generate_stream(layout_server, body))
    assert streamed == whole
    assert any(ord(c) > 127 for c in whole), "expected some non-ASCII output from the random model"


def test_exclude_input_in_output(layout_server):
    prompt = "Repeat after me: purple"
    body = {"text_input": prompt, "max_tokens": 4, "apply_chat_template": False}
    default = generate(layout_server, body).json()["text_output"]
    with_prompt = generate(layout_server, {**body, "exclude_input_in_output": False}).json()["text_output"]
    assert not default.startswith(prompt)
    assert with_prompt == prompt + default
    streamed = "".join(
        e["text_output"] for e in generate_stream(layout_server, {**body, "exclude_input_in_output": False})
    )
    assert streamed == with_prompt


def test_max_tokens_is_exact(layout_server):
    # min_tokens = max_tokens forbids an early end token, so the count must be exact.
    for n in (1, 5, 17):
        events = generate_stream(layout_server, {"text_input": "Count", "max_tokens": n, "min_tokens": n})
        tokens = sum(len(e["output_log_probs"]) if isinstance(e["output_log_probs"], list) else 1 for e in events)
        assert tokens == n


def test_text_stop_words_end_generation_and_never_appear(layout_server):
    """stop_words_match "text" (the OpenAI frontend's choice; the default is upstream's token sequences,
    tests/e2e/test_upstream_clients.py): any substring of the text stops, and is cut from the output."""
    body = {"text_input": "Write anything.", "max_tokens": 64, "min_tokens": 64}
    full = generate(layout_server, body).json()["text_output"]
    # Pick a stop string from the middle of the greedy output: generation must end right before it.
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert len(stop.strip()) > 0
    as_text = {"stop_words": [stop], "stop_words_match": "text"}
    cut = generate(layout_server, {"text_input": "Write anything.", "max_tokens": 64, **as_text})
    text = cut.json()["text_output"]
    assert stop not in text
    assert full.startswith(text)
    assert len(text) <= full.index(stop)
    # The engine stopped spending work: fewer tokens were generated than max_tokens.
    assert len(cut.json()["output_log_probs"]) < 64
    streamed = "".join(
        e["text_output"]
        for e in generate_stream(layout_server, {"text_input": "Write anything.", "max_tokens": 64, **as_text})
    )
    assert streamed == text


def test_greedy_is_deterministic_and_seeded_sampling_reproducible(layout_server):
    body = {"text_input": "Determinism", "max_tokens": 24}
    assert generate(layout_server, body).json() == generate(layout_server, body).json()
    sampled = {**body, "temperature": 1.0, "top_p": 0.95, "top_k": 50}
    a = generate(layout_server, {**sampled, "seed": 1234}).json()["text_output"]
    b = generate(layout_server, {**sampled, "seed": 1234}).json()["text_output"]
    c = generate(layout_server, {**sampled, "seed": 99}).json()["text_output"]
    assert a == b
    assert a != c


def test_token_level_tutorial_client(layout_server):
    """input_ids / input_lengths / request_output_len -> output_ids / sequence_length over unary
    HTTP infer (on the unary twin: Triton refuses unary infer on the decoupled tensorrt_llm)."""
    client = httpclient.InferenceServerClient(layout_server.http)
    ids = np.array([[1, 504, 3458, 314, 260]], dtype=np.int32)
    inputs = []
    for name, arr in (
        ("input_ids", ids),
        ("input_lengths", np.array([[ids.shape[1]]], dtype=np.int32)),
        ("request_output_len", np.array([[6]], dtype=np.int32)),
    ):
        t = httpclient.InferInput(name, list(arr.shape), "INT32")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    result = client.infer("tensorrt_llm_unary", inputs)
    out, length = result.as_numpy("output_ids"), result.as_numpy("sequence_length")
    assert out.shape[:2] == (1, 1) and length.reshape(-1)[0] == out.shape[-1] <= 6
    with pytest.raises(InferenceServerException, match="decoupled"):
        client.infer("tensorrt_llm", inputs)  # what Triton says, documented in README


def test_unary_grpc_infer_on_the_ensemble_twin(layout_server):
    client = grpcclient.InferenceServerClient(layout_server.grpc)
    result = client.infer("ensemble_unary", grpc_inputs("Hello", 8))
    text = result.as_numpy("text_output").reshape(-1)[0].decode()
    assert text == generate(layout_server, {"text_input": "Hello", "max_tokens": 8}).json()["text_output"]
    with pytest.raises(InferenceServerException, match="decoupled"):
        client.infer("ensemble", grpc_inputs("Hello", 8))


def test_sixteen_concurrent_streams_complete_and_batch(layout_server):
    prompts = [f"Request number {i}: say something." for i in range(16)]
    expected = {p: generate(layout_server, {"text_input": p, "max_tokens": 32}).json()["text_output"] for p in prompts}
    before = _metric(layout_server, "llmserve_batched_decode_steps_total")
    with cf.ThreadPoolExecutor(16) as pool:
        streamed = dict(zip(prompts, pool.map(lambda p: "".join(grpc_stream(layout_server, p, 32)), prompts)))
    assert streamed == expected
    import time

    time.sleep(1.2)  # metrics publish every 0.5 s
    assert _metric(layout_server, "llmserve_batch_size_max") > 1
    assert _metric(layout_server, "llmserve_batched_decode_steps_total") > before


def _metric(server, name: str) -> float:
    text = requests.get(server.metrics, timeout=10).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, f"{name} not exported"
    return sum(values)


def test_health_and_metrics(layout_server):
    base = f"http://{layout_server.http}"
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/ensemble/ready", "/v2/models/tensorrt_llm/ready"):
        assert requests.get(base + path, timeout=10).status_code == 200, path
    generate(layout_server, {"text_input": "warm", "max_tokens": 2})
    import time

    time.sleep(1.2)
    text = requests.get(layout_server.metrics, timeout=10).text
    for model in ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing"):
        assert f'nv_inference_request_success{{model="{model}"' in text, model
    for name in (
        "llmserve_requests_running",
        "llmserve_requests_waiting",
        "llmserve_generated_tokens_total",
        "llmserve_kv_cache_utilization",
    ):
        assert name in text, name

    # Where the first token waited inside the engine model (the torch engine, or the stand-in past the relay):
    # sums of seconds with their counts, queue time (arrival -> first step) within time to first token.
    def value(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))

    assert value("llmserve_first_tokens_total") >= 1 and value("llmserve_requests_admitted_total") >= 1
    assert 0 < value("llmserve_request_queue_seconds_total") < value("llmserve_time_to_first_token_seconds_total")


def test_admin_endpoints_are_restricted(layout_server):
    base = f"http://{layout_server.http}"
    r = requests.post(base + "/v2/repository/index", timeout=10)
    assert r.status_code in (401, 403), r.status_code
    r = requests.post(base + "/v2/logging", json={"log_verbose_level": 1}, timeout=10)
    assert r.status_code in (401, 403), r.status_code


def test_stream_that_ends_before_any_token_still_answers(layout_server):
    """The end token as the very first token: one empty text_output, streamed or not."""
    from llmserve.spec import ROOT
    from llmserve.text.tokenizer import load_fast

    ids = load_fast(ROOT / "build/checkpoints/tiny-random-llama").encode("Hi").ids
    client = httpclient.InferenceServerClient(layout_server.http)
    inputs = []
    for name, arr in (
        ("input_ids", np.array([ids], dtype=np.int32)),
        ("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
        ("request_output_len", np.array([[1]], dtype=np.int32)),
    ):
        t = httpclient.InferInput(name, list(arr.shape), "INT32")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    first = int(client.infer("tensorrt_llm_unary", inputs).as_numpy("output_ids").reshape(-1)[0])
    body = {"text_input": "Hi", "apply_chat_template": False, "max_tokens": 4, "end_id": first}
    assert generate(layout_server, body).json()["text_output"] == ""
    events = generate_stream(layout_server, body)
    assert [e["text_output"] for e in events] == [""]
