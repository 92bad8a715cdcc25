"""The OpenAI API's `top_logprobs` in the tensorrtllm layout: a frontend in front of the tensorrtllm layout
(the relay computes the alternatives from the C++ backend's generation_logits; CI's stand-in serves the
backend with the torch engine underneath) answers what a frontend in front of the torch layout answers,
for the same tiny checkpoint and prompt, greedy: the same tokens and alternatives, log-probs within
TOLERANCE (float noise from batching: both run the torch engine in fp32 on CPU)."""

from __future__ import annotations

import openai
import pytest
import requests

from llmserve.contract import BACKEND
from llmserve.deploy.frontend import FrontendProcess
from llmserve.deploy.tritonserver import free_ports
from llmserve.spec import ROOT, load_spec

pytestmark = [pytest.mark.e2e]

SPECS = {"torch": ROOT / "specs/tiny.yaml", "tensorrtllm": ROOT / "specs/tiny-trtllm.yaml"}
TOLERANCE = 1e-4  # absolute, on log-probabilities


@pytest.fixture(scope="module")
def clients(tiny_server, trtllm_server, tmp_path_factory):
    work = tmp_path_factory.mktemp("openai-layouts")
    servers = {"torch": tiny_server, "tensorrtllm": trtllm_server}
    frontends = {
        layout: FrontendProcess(
            SPECS[layout],
            port=port,
            triton=[servers[layout].grpc],
            triton_http=[servers[layout].http],
            log_path=work / f"frontend-{layout}.log",
        )
        for layout, port in zip(SPECS, free_ports(2))
    }
    try:
        for f in frontends.values():
            f.start().wait_ready(120)
        yield {
            layout: (
                openai.OpenAI(base_url=f"http://127.0.0.1:{f.port}/v1", api_key="unused", max_retries=0),
                load_spec(SPECS[layout]).name,
            )
            for layout, f in frontends.items()
        }
    finally:
        for f in frontends.values():
            f.stop()


def chat_logprobs(client, model, stream=False):
    kw = dict(
        model=model,
        messages=[{"role": "user", "content": "Name a color."}],
        max_tokens=8,
        logprobs=True,
        top_logprobs=5,
        temperature=0,
    )
    if not stream:
        return client.chat.completions.create(**kw).choices[0].logprobs.content
    return [
        e
        for ch in client.chat.completions.create(**kw, stream=True)
        for x in ch.choices
        for e in ((x.logprobs.content or []) if x.logprobs else [])
    ]


def test_top_logprobs_agree_with_the_torch_layout(clients):
    (torch_client, torch_model), (trt_client, trt_model) = clients["torch"], clients["tensorrtllm"]
    want, got = chat_logprobs(torch_client, torch_model), chat_logprobs(trt_client, trt_model)
    assert got and len(got) == len(want) and all(len(e.top_logprobs) == 5 for e in got)
    for g, w in zip(got, want):
        assert g.token == w.token and [a.token for a in g.top_logprobs] == [a.token for a in w.top_logprobs]
        assert g.top_logprobs[0].token == g.token  # greedy: the sampled token is the most likely
        for a, b in zip(g.top_logprobs, w.top_logprobs):
            assert abs(a.logprob - b.logprob) <= TOLERANCE, (g.token, a, b)
    streamed = chat_logprobs(trt_client, trt_model, stream=True)
    assert [(e.token, [a.token for a in e.top_logprobs]) for e in streamed] == [
        (e.token, [a.token for a in e.top_logprobs]) for e in got
    ]
    completion = trt_client.completions.create(model=trt_model, prompt="Hello", max_tokens=4, logprobs=3, temperature=0)
    lp = completion.choices[0].logprobs
    assert len(lp.top_logprobs) == len(lp.tokens) >= 1 and all(1 <= len(t) <= 4 for t in lp.top_logprobs)


def _requests_of(metrics_url: str, model: str) -> float:
    r = requests.get(metrics_url, timeout=5)
    r.raise_for_status()
    text = r.text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("nv_inference_request_success{") and f'model="{model}"' in line
    )


@pytest.mark.parametrize("stream", [False, True])
def test_the_token_level_path_reads_the_backend_model_itself(clients, trtllm_server, stream):
    """On the tensorrtllm layout the frontend streams from the C++ backend's model (tensorrt_llm_cpp)
    itself, past the relay and the ensemble, and answers what the torch layout's frontend answers:
    the same tokens, log-probs within TOLERANCE, a stop string cut the same way."""
    (torch_client, torch_model), (trt_client, trt_model) = clients["torch"], clients["tensorrtllm"]
    kw = dict(prompt="Hello there", max_tokens=12, logprobs=0, temperature=0, stream=stream)
    metrics = trtllm_server.metrics
    before = {m: _requests_of(metrics, m) for m in ("ensemble", "tensorrt_llm", BACKEND)}

    def answer(client, model, **more):
        r = client.completions.create(model=model, **kw, **more)
        chunks = list(r) if stream else [r]
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        lps = [x for c in chunks if c.choices and c.choices[0].logprobs for x in c.choices[0].logprobs.token_logprobs]
        return text, lps, chunks[-1].choices[0].finish_reason

    want, got = answer(torch_client, torch_model), answer(trt_client, trt_model)
    assert got[0] == want[0] and len(got[1]) == len(want[1]) == 12
    assert all(abs(a - b) <= TOLERANCE for a, b in zip(got[1], want[1])), (got[1], want[1])
    after = {m: _requests_of(metrics, m) for m in before}
    assert after["ensemble"] == before["ensemble"] and after["tensorrt_llm"] == before["tensorrt_llm"]
    assert after[BACKEND] == before[BACKEND] + 1
    stop = want[0][len(want[0]) // 2 :][:2]  # from the middle of the text
    if stop.strip():
        cut = answer(trt_client, trt_model, stop=[stop])
        assert cut[0] == want[0][: want[0].index(stop)] and cut[2] == "stop", (cut, stop, want)
        assert answer(torch_client, torch_model, stop=[stop])[0] == cut[0]
