"""The relay reading the C++ backend over HTTP generate_stream (engine.tensorrtllm.relay_transport: http)
against the gRPC relay of `trtllm_server`: the same stand-in, greedy, so every answer must be the same
byte for byte, through the ensemble and read token-level; what generate cannot carry (generation logits
for top log-probs) still works, over gRPC; and a `stop` still ends a generation. The relay refuses bad
input itself before the backend sees it; the backend's errors over HTTP are read as the unit tests of
pipeline/backend_http.py show (tests/unit/pipeline/test_backend_http.py)."""

from __future__ import annotations

import pytest
import yaml

from llmserve import contract as C
from llmserve.spec import ROOT

from ..conftest import start_server, stop
from .client import generate, generate_stream
from .test_trtllm_layout import BACKEND_OUTPUTS, Stream, _inputs

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def http_relay_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny-trtllm-http")
    spec = yaml.safe_load((ROOT / "specs/tiny-trtllm.yaml").read_text())
    spec["engine"]["tensorrtllm"]["relay_transport"] = "http"
    path = work / "tiny-trtllm-http.yaml"
    path.write_text(yaml.safe_dump(spec))
    server = start_server(path, work, standin=True)
    yield server
    stop(server)


def test_the_relay_is_configured_for_http(http_relay_server):
    config = (http_relay_server.repository / C.ENGINE / "config.pbtxt").read_text()
    assert 'key: "backend_transport"' in config and 'string_value: "http"' in config


BODIES = [
    {"text_input": "Tell me a story about a dragon.", "max_tokens": 32, "return_log_probs": True},
    {"text_input": "日本語で答えてください。", "max_tokens": 24, "exclude_input_in_output": False},
    {"text_input": "Write anything.", "max_tokens": 40, "stop_words": ["the", "a"]},  # token sequences
    {"text_input": "Write anything.", "max_tokens": 40, "stop_words": [" a"], "stop_words_match": "text"},
    {"text_input": "Write anything.", "max_tokens": 24, "bad_words": ["the"], "min_tokens": 24},
    {"text_input": "Sample", "max_tokens": 24, "temperature": 1.0, "top_p": 0.9, "seed": 7},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_ensemble_answers_alike_over_both_transports(trtllm_server, http_relay_server, body):
    over_grpc, over_http = generate(trtllm_server, body), generate(http_relay_server, body)
    assert over_grpc.status_code == over_http.status_code == 200, over_http.text
    assert over_http.json() == over_grpc.json()
    streamed = ["".join(e["text_output"] for e in generate_stream(s, body)) for s in (trtllm_server, http_relay_server)]
    assert streamed[1] == streamed[0] == over_grpc.json()["text_output"]


def test_top_log_probs_go_over_grpc_and_agree(trtllm_server, http_relay_server):
    body = {"text_input": "The capital of France is", "max_tokens": 6, "num_top_log_probs": 3}
    over_grpc, over_http = generate(trtllm_server, body), generate(http_relay_server, body)
    assert over_http.status_code == 200, over_http.text
    assert over_http.json() == over_grpc.json()


def _token_level(server, request_id: str) -> list[tuple[list, list]]:
    s = Stream(server)
    try:
        s.send(C.ENGINE, _inputs(12, min_tokens=12, streaming=True, return_log_probs=True), request_id, BACKEND_OUTPUTS)
        got, err = s.until_final(request_id)
    finally:
        s.close()
    assert err is None
    return [(r.as_numpy("output_ids").reshape(-1).tolist(), r.as_numpy("output_log_probs").tolist()) for r in got]


def test_token_level_reads_alike_over_both_transports(trtllm_server, http_relay_server):
    assert _token_level(http_relay_server, "t-http") == _token_level(trtllm_server, "t-grpc")


def test_a_stop_ends_a_generation_read_over_http(http_relay_server):
    s = Stream(http_relay_server)
    try:
        s.send(C.ENGINE, _inputs(200, min_tokens=200, streaming=True), "long-http", BACKEND_OUTPUTS)
        _, e = s.results.get(timeout=120)  # the first token: it runs
        assert e is None
        s.send(C.ENGINE, _inputs(1, stop=True), "long-http", BACKEND_OUTPUTS)
        got, err = s.until_final("long-http")
    finally:
        s.close()
    assert len(got) < 150, "the stop request did not end the generation"
