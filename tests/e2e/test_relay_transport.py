"""The relay's two ways to the C++ backend (engine.tensorrtllm.relay_transport): `trtllm_server` reads it
over HTTP generate_stream (the default; every tensorrtllm-layout suite runs on it), `grpc_relay_server`
over gRPC. The same stand-in, greedy: every answer must be the same byte for byte, through the ensemble
and read token-level; what generate cannot carry (generation logits, for top log-probs) goes over gRPC on
both; a `stop` ends a generation on both. The relay refuses bad input itself before the backend sees it;
the backend's errors over HTTP are read as tests/unit/pipeline/test_backend_http.py shows."""

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
def grpc_relay_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny-trtllm-grpc")
    spec = yaml.safe_load((ROOT / "specs/tiny-trtllm.yaml").read_text())
    spec["engine"]["tensorrtllm"]["relay_transport"] = "grpc"
    path = work / "tiny-trtllm-grpc.yaml"
    path.write_text(yaml.safe_dump(spec))
    server = start_server(path, work, standin=True)
    yield server
    stop(server)


@pytest.mark.parametrize("fixture, transport", [("trtllm_server", "http"), ("grpc_relay_server", "grpc")])
def test_each_relay_is_configured_for_its_transport(request, fixture, transport):
    config = (request.getfixturevalue(fixture).repository / C.ENGINE / "config.pbtxt").read_text()
    assert f'key: "backend_transport"\n  value {{\n    string_value: "{transport}"' in config


BODIES = [
    {"text_input": "Tell me a story about a dragon.", "max_tokens": 32, "return_log_probs": True},
    {"text_input": "日本語で答えてください。", "max_tokens": 24, "exclude_input_in_output": False},
    {"text_input": "Write anything.", "max_tokens": 40, "stop_words": ["the", "a"]},  # token sequences
    {"text_input": "Write anything.", "max_tokens": 40, "stop_words": [" a"], "stop_words_match": "text"},
    {"text_input": "Write anything.", "max_tokens": 24, "bad_words": ["the"], "min_tokens": 24},
    {"text_input": "Sample", "max_tokens": 24, "temperature": 1.0, "top_p": 0.9, "seed": 7},
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_the_ensemble_answers_alike_over_both_transports(trtllm_server, grpc_relay_server, body):
    over_http, over_grpc = generate(trtllm_server, body), generate(grpc_relay_server, body)
    assert over_grpc.status_code == over_http.status_code == 200, over_http.text
    assert over_http.json() == over_grpc.json()
    streamed = ["".join(e["text_output"] for e in generate_stream(s, body)) for s in (trtllm_server, grpc_relay_server)]
    assert streamed[1] == streamed[0] == over_grpc.json()["text_output"]


def test_top_log_probs_go_over_grpc_and_agree(trtllm_server, grpc_relay_server):
    body = {"text_input": "The capital of France is", "max_tokens": 6, "num_top_log_probs": 3}
    over_http, over_grpc = generate(trtllm_server, body), generate(grpc_relay_server, body)
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


def test_token_level_reads_alike_over_both_transports(trtllm_server, grpc_relay_server):
    assert _token_level(trtllm_server, "t-http") == _token_level(grpc_relay_server, "t-grpc")


def test_a_stop_ends_the_generation_read_over_grpc(grpc_relay_server):
    """(Over HTTP: test_trtllm_layout.py's test_stop_input_cancels_by_request_id, on trtllm_server.)"""
    s = Stream(grpc_relay_server)
    try:
        s.send(C.ENGINE, _inputs(200, min_tokens=200, streaming=True), "long-stop", BACKEND_OUTPUTS)
        _, e = s.results.get(timeout=120)  # the first token: it runs
        assert e is None
        s.send(C.ENGINE, _inputs(1, stop=True), "long-stop", BACKEND_OUTPUTS)
        got, err = s.until_final("long-stop")
    finally:
        s.close()
    assert len(got) < 150, "the stop request did not end the generation"
