"""The failover client against real servers: a greedy stream resumed on another server after its
first server is killed mid-stream equals an uninterrupted run (SmolLM2, real text), over HTTP and
gRPC; retries skip a dead endpoint; client errors are not retried."""

from __future__ import annotations

import os
import signal

import pytest

from llmserve.client.failover import FailoverClient, GenerationError, Stats
from llmserve.spec import ROOT, load_spec

from ..conftest import start_server, stop

DEFAULT = ROOT / "specs" / "default.yaml"
PROMPT = "Write a short poem about the sea."
TOKENS = 32
CUT_AFTER = 10  # pieces


@pytest.fixture(scope="module")
def two_smollm2(tmp_path_factory):
    servers = []
    try:
        for i in range(2):
            servers.append(
                start_server(DEFAULT, tmp_path_factory.mktemp(f"smol{i}"), repository=ROOT / "model_repository")
            )
        yield servers
    finally:
        for s in servers:
            stop(s)  # SIGTERM, then the group killed after STOP_WAIT_S (a client's idle keep-alive held it 60 s)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_resumed_greedy_stream_equals_uninterrupted(two_smollm2, protocol):
    a, b = two_smollm2
    ep = (lambda s: s.http) if protocol == "http" else (lambda s: s.grpc)
    tok = str(load_spec(DEFAULT).checkpoint_path())
    # Uninterrupted reference on b (greedy: the default sampling of the ensemble is greedy).
    reference = "".join(FailoverClient([ep(b)], protocol=protocol).stream(PROMPT, TOKENS))
    client = FailoverClient([ep(a), ep(b)], protocol=protocol, tokenizer_dir=tok, backoff_s=0.05, start=0)  # a first
    gen = client.stream(PROMPT, TOKENS)
    pieces = []
    for i, piece in enumerate(gen):
        pieces.append(piece)
        if i + 1 == CUT_AFTER:
            assert gen.endpoint == ep(a)
            os.killpg(a.process.proc.pid, signal.SIGKILL)  # the server and its Python stubs
            a.process.proc.wait()
    text = "".join(pieces)
    print(
        f"\n[resume {protocol}] cut after {CUT_AFTER} pieces; {gen.stats}\n  resumed:   {text!r}\n  reference: {reference!r}"
    )
    assert gen.stats.resumes == 1
    assert text == reference
    a.process.start().wait_ready(300)  # for the next case


def test_dead_endpoint_is_skipped_and_client_errors_are_not_retried(two_smollm2):
    _, b = two_smollm2
    client = FailoverClient(["localhost:1", b.http], backoff_s=0.01)
    st = Stats()
    for _ in range(2):
        assert client.generate("Hi", 4, stats=st)
    # Only the dead endpoint failed, and each time the next attempt went to the live one.
    assert st.retries >= 1 and st.attempts == 2 + st.retries
    assert all(e.startswith("localhost:1:") for e in st.errors)
    st = Stats()
    with pytest.raises(GenerationError) as e:
        client.generate("Hi", 100000, stats=st)
    print(f"\n[client errors] {e.value} after {st.attempts} attempt(s)")
    assert e.value.status == 400 and st.attempts == st.retries + 1  # dead endpoint aside, sent once
