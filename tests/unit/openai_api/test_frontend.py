"""The frontend's HTTP surface with the real openai SDK against a scripted ensemble (no Triton):
SSE framing, usage, refusals naming the field, API keys, busy -> 503, hang-up cancels."""

from __future__ import annotations

import json
import time

import openai
import pytest
import requests

from llmserve.deploy.tritonserver import free_ports
from llmserve.openai_api.errors import busy
from llmserve.spec import ROOT, load_spec

from .fake import FakeEnsemble, Frontend

TOKENIZER = str(load_spec(ROOT / "specs" / "default.yaml").checkpoint_path())
KEY = "sk-test-0123456789"


@pytest.fixture(scope="module")
def fe():
    fake = FakeEnsemble()
    with Frontend(TOKENIZER, free_ports(1)[0], fake) as f:
        yield f


@pytest.fixture
def fake(fe):
    fe.fake.pieces, fe.fake.delay_s, fe.fake.error = [("你好", 1), ("🌊", 2), (" ok", 1)], 0.0, None
    return fe.fake


def client(fe, **kw):
    return openai.OpenAI(base_url=fe.url + "/v1", api_key="unused", max_retries=0, **kw)


def test_chat_whole_and_streamed(fe, fake):
    c = client(fe)
    r = c.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}], max_tokens=10)
    assert r.choices[0].message.content == "你好🌊 ok" and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 4 and r.usage.total_tokens == r.usage.prompt_tokens + 4
    sent = fake.requests[-1]
    assert sent["apply_chat_template"] is False and sent["stream"] is True and sent["max_tokens"] == 10
    assert sent["text_input"].endswith("<|im_start|>assistant\n")
    chunks = list(
        c.chat.completions.create(
            model="test-model",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "你好🌊"
    assert chunks[-2].choices[0].finish_reason == "length"  # 3 tokens = max_tokens
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert all(ch.usage is None for ch in chunks[:-1])


def test_raw_sse_ends_with_done_and_utf8(fe, fake):
    r = requests.post(
        fe.url + "/v1/completions",
        json={"model": "test-model", "prompt": "x", "stream": True, "max_tokens": 8},
        stream=True,
        timeout=30,
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [line for line in r.iter_lines() if line]
    assert events[-1] == b"data: [DONE]"
    assert "你好".encode() in b"".join(events)  # UTF-8, not \\u escapes
    assert json.loads(events[-2][5:])["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "body,param",
    [
        ({"n": 0}, "n"),
        ({"n": 17}, "n"),
        ({"n": "2"}, "n"),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}},
            },
            "tool_choice",
        ),
        ({"logprobs": 1}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"logit_bias": {"5": 1}}, "logit_bias"),
        ({"foo": 1}, "foo"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 65}, "max_tokens"),
        ({"top_p": 0}, "top_p"),
        ({"seed": -1}, "seed"),
        ({"stop": [""]}, "stop"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content[0].type",
        ),
        ({"min_tokens": 20, "max_tokens": 10}, "min_tokens"),
    ],
)
def test_refusals_name_the_field(fe, fake, body, param):
    req = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], **body}
    r = requests.post(fe.url + "/v1/chat/completions", json=req, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error", err


def test_defaults_are_accepted(fe, fake):
    r = requests.post(
        fe.url + "/v1/chat/completions",
        timeout=30,
        json={
            "model": "test-model",
            "messages": [
                {"role": "developer", "content": "x"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            ],
            "n": 1,
            "logprobs": False,
            "response_format": {"type": "text"},
            "tool_choice": "none",
            "user": "u1",
            "stream_options": None,
            "temperature": 1,
            "seed": 3,
        },
    )
    assert r.status_code == 200, r.text
    assert fake.requests[-1]["temperature"] == 1 and fake.requests[-1]["seed"] == 3


def test_completions_prompt_forms(fe, fake):
    ok = requests.post(fe.url + "/v1/completions", json={"model": "test-model", "prompt": ["one"]}, timeout=30)
    assert ok.status_code == 200 and fake.requests[-1]["text_input"] == "one"
    body = {"model": "test-model", "prompt": ["a", "b"], "n": 2}
    two = requests.post(fe.url + "/v1/completions", json=body, timeout=30).json()
    assert [c["index"] for c in two["choices"]] == [0, 1, 2, 3]
    assert sorted(r["text_input"] for r in fake.requests[-4:]) == ["a", "a", "b", "b"]
    for prompt, param in (([], "prompt"), ([1, 2, 3], "prompt"), ("", "prompt"), (["a", ""], "prompt[1]")):
        r = requests.post(fe.url + "/v1/completions", json={"model": "test-model", "prompt": prompt}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_malformed_json_unknown_model_and_path(fe, fake):
    r = requests.post(fe.url + "/v1/chat/completions", data=b'{"model": ', timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client(fe).chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])
    assert requests.get(fe.url + "/v2/whatever", timeout=30).status_code == 404


def test_busy_is_503_with_retry_after(fe, fake):
    fake.error = busy("every Triton server is busy; retry later")
    for stream in (False, True):
        r = requests.post(
            fe.url + "/v1/chat/completions",
            timeout=30,
            json={"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        )
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
        assert r.json()["error"]["code"] == "server_busy"


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("stream", [True, False])
def test_hang_up_cancels_the_generation(fe, fake, stream, n):
    """Every choice's generation (n of them) is cancelled."""
    fake.pieces, fake.delay_s = [("x", 1)] * 200, 0.05
    cancelled = fake.cancelled
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64, "stream": stream}
    body["n"] = n
    if stream:
        r = requests.post(fe.url + "/v1/chat/completions", json=body, stream=True, timeout=30)
        next(r.iter_lines())
        r.close()
    else:
        with pytest.raises(requests.Timeout):
            requests.post(fe.url + "/v1/chat/completions", json=body, timeout=(5, 0.3))
    deadline = time.monotonic() + 10
    while fake.cancelled < cancelled + n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.cancelled == cancelled + n and fake.active == 0
    metrics = requests.get(fe.url + "/metrics", timeout=30).text
    assert 'llmserve_api_request_success_total{finished_reason="abort",model="test-model"}' in metrics


def test_metrics_follow_vllm_names(fe, fake):
    client(fe).chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
    text = requests.get(fe.url + "/metrics", timeout=30).text
    for name in (
        "time_to_first_token_seconds",
        "inter_token_latency_seconds",
        "e2e_request_latency_seconds",
        "request_queue_time_seconds",
        "prompt_tokens_total",
        "generation_tokens_total",
        "request_success_total",
        "request_prompt_tokens",
        "request_generation_tokens",
    ):
        assert f"llmserve_api_{name}" in text, name
    assert 'llmserve_api_time_to_first_token_seconds_bucket{le="2560.0",model="test-model"}' in text


def test_api_keys(fake, capfd):
    f = Frontend(TOKENIZER, free_ports(1)[0], fake, keys=[KEY])
    with f:
        with pytest.raises(openai.AuthenticationError):
            client(f).models.list()
        bad = openai.OpenAI(base_url=f.url + "/v1", api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
        assert e.value.body["code"] == "invalid_api_key" and "sk-wrong" not in json.dumps(e.value.body)
        good = openai.OpenAI(base_url=f.url + "/v1", api_key=KEY, max_retries=0)
        assert [m.id for m in good.models.list().data] == ["test-model"]
        assert requests.get(f.url + "/health", timeout=30).status_code == 200  # probes need no key
    out, err = capfd.readouterr()
    assert KEY not in out + err and "sk-wrong" not in out + err


def test_oversized_prompts_are_refused_before_tokenizing(fe, fake):
    huge = "word " * 200_000  # ~1 MB: more bytes than 256 tokens can hold
    r = requests.post(fe.url + "/v1/completions", json={"model": "test-model", "prompt": huge}, timeout=30)
    assert r.status_code in (400, 413), r.text
    assert r.json()["error"]["code"] in ("context_length_exceeded", "request_too_large")
    r = requests.post(fe.url + "/v1/completions", json={"model": "test-model", "prompt": "word " * 300}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
